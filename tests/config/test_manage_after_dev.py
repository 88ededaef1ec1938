"""Management commands after `scripts/dev` (issue 29): the README's next step, `.venv/bin/python manage.py
create_project …`, needed LEASEHOLD_DEBUG=1 and answered a 30-line traceback without it. `scripts/dev` now
leaves a marker in the data directory that makes `manage.py` run as its server does; without it, a missing
setting is one line naming what to set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import manage

ROOT = Path(__file__).resolve().parents[2]


def run_manage(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGS` as a shell after `scripts/dev` has it: no LEASEHOLD_* variable, a fresh data dir."""
    ignored = {"DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE", "DJANGO_SETTINGS_MODULE"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k not in ignored}
    clean.update(LEASEHOLD_DATA_DIR=str(data_dir), **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=180
    )


def test_without_the_marker_a_missing_secret_key_is_one_line_naming_what_to_set(tmp_path):
    done = run_manage(tmp_path, "create_project", "demo", "--name", "Demo")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("manage.py: LEASEHOLD_SECRET_KEY is not set")
    assert "LEASEHOLD_DEBUG=1" in line


def test_after_scripts_dev_management_commands_work_without_extra_variables(tmp_path):
    # What scripts/dev leaves behind: the marker (its migrate ran with LEASEHOLD_DEBUG=1, as the marker's does).
    (tmp_path / manage.DEVELOPMENT_MARKER).write_text("Written by scripts/dev\n")
    migrated = run_manage(tmp_path, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    created = run_manage(tmp_path, "create_project", "demo", "--name", "Demo")
    assert created.returncode == 0, created.stderr[-2000:]
    assert (tmp_path / "secret_key").exists()  # the development key, beside the database
    # A variable the user sets still wins over the marker.
    refused = run_manage(tmp_path, "create_project", "demo2", "--name", "Demo 2", LEASEHOLD_DEBUG="0")
    assert refused.returncode == 2
    assert "LEASEHOLD_SECRET_KEY" in refused.stderr


def test_scripts_dev_writes_the_marker_manage_py_reads_and_one_login_hint():
    script = (ROOT / "scripts" / "dev").read_text()
    assert re.search(r'"\$\{LEASEHOLD_DATA_DIR:-var\}/' + manage.DEVELOPMENT_MARKER + '"', script)
    assert "bootstrap_admin --login-url" in script
    assert "log in" not in script.lower().replace("bootstrap_admin --login-url", "")  # the command's line only
