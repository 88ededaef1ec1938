"""Bad LEASEHOLD_* values stop start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_django(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    clean.update({"LEASEHOLD_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings.base"})
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LEASEHOLD_DEBUG", "maybe"),
        ("LEASEHOLD_MIN_LEASE_SECONDS", "ten"),
        ("LEASEHOLD_MAX_LEASE_SECONDS", "-5"),
        ("LEASEHOLD_CONTEXT_MAX_BYTES", "12k"),
        ("LEASEHOLD_AGENT_SILENCE_SECONDS", "0"),
        ("LEASEHOLD_STALL_SECONDS", "0"),
        ("LEASEHOLD_INCIDENT_RECONCILIATION_RUNS", "three"),
        ("LEASEHOLD_INCIDENT_WEBHOOK_FAILURES", "21"),
        ("LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES", "0"),
        ("LEASEHOLD_BACKUP_KEEP", "0"),
        ("LEASEHOLD_ALLOWED_HOSTS", " , "),
        ("LEASEHOLD_REDIS_URL", "http://nope"),
        ("LEASEHOLD_SECRET_KEY", "short"),
        ("DATABASE_URL", "mysql://root@localhost/db"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(tmp_path, variable, value):
    env = {"LEASEHOLD_DEBUG": "1", variable: value}
    result = start_django(tmp_path, **env)
    assert result.returncode != 0
    assert "started" not in result.stdout
    assert variable in result.stderr


def test_min_above_max_is_refused(tmp_path):
    result = start_django(
        tmp_path, LEASEHOLD_DEBUG="1", LEASEHOLD_MIN_LEASE_SECONDS="600", LEASEHOLD_MAX_LEASE_SECONDS="60"
    )
    assert result.returncode != 0
    assert "LEASEHOLD_MIN_LEASE_SECONDS" in result.stderr


def test_production_mode_refuses_to_start_without_a_secret_key(tmp_path):
    result = start_django(tmp_path)
    assert result.returncode != 0
    assert "LEASEHOLD_SECRET_KEY" in result.stderr


def test_debug_mode_generates_a_development_key_once(tmp_path):
    assert start_django(tmp_path, LEASEHOLD_DEBUG="1").returncode == 0
    key_file = tmp_path / "secret_key"
    first = key_file.read_text()
    assert len(first) >= 50
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert start_django(tmp_path, LEASEHOLD_DEBUG="1").returncode == 0
    assert key_file.read_text() == first


def test_sqlite_is_tuned_for_concurrent_writers(tmp_path):
    code = (
        "import django; django.setup();"
        "from django.db import connection;"
        "c = connection.cursor();"
        "print([c.execute(f'PRAGMA {p}').fetchone()[0] for p in "
        "('journal_mode', 'synchronous', 'foreign_keys', 'busy_timeout')])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(tmp_path), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['wal', 1, 1, 5000]"
