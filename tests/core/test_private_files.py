"""Nothing in the data directory is readable by the machine's other users, whatever the umask (issue 27).

The database holds webhook secrets, session keys and password hashes: the
data directory is 0700 and the SQLite database, its WAL and shared-memory
files 0600, created so (never readable for a moment) or made so when an
older install left them readable.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Migrate, then write on a connection that stays open, so the -wal and -shm files exist while `find` looks.
WRITE_AND_FIND = (
    "import django, subprocess, sys; django.setup(); from django.core.management import call_command; "
    "call_command('migrate', verbosity=0); from django.db import connection; "
    "cursor = connection.cursor(); cursor.execute('CREATE TABLE scratch (x)'); "
    "cursor.execute('INSERT INTO scratch VALUES (1)'); "
    "import json, os; print(json.dumps({'names': sorted(os.listdir(sys.argv[1])), "
    "'readable': subprocess.run(['find', sys.argv[1], '-perm', '/044'], capture_output=True, text=True).stdout}))"
)


def _run_with_umask_022(data_dir: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(data_dir), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    return subprocess.run(
        [sys.executable, "-c", code, str(data_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=lambda: os.umask(0o022),
    )


def test_a_fresh_data_dir_and_its_database_are_private_under_umask_022(tmp_path):
    data_dir = tmp_path / "deploy" / "var"  # neither exists yet
    result = _run_with_umask_022(data_dir, WRITE_AND_FIND)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)
    assert seen["readable"] == ""  # find var -perm /044 finds nothing
    names = set(seen["names"])
    assert {"leasehold.sqlite3", "leasehold.sqlite3-wal", "leasehold.sqlite3-shm", "secret_key"} <= names, names
    assert data_dir.stat().st_mode & 0o777 == 0o700
    assert (data_dir / "leasehold.sqlite3").stat().st_mode & 0o777 == 0o600


def test_an_older_readable_database_is_made_private_when_the_server_opens_it(tmp_path):
    data_dir = tmp_path / "var"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    old_mask = os.umask(0o022)
    try:
        raw = sqlite3.connect(data_dir / "leasehold.sqlite3")
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("CREATE TABLE old (x)")
        raw.commit()
    finally:
        os.umask(old_mask)
    try:
        assert (data_dir / "leasehold.sqlite3-wal").stat().st_mode & 0o044  # readable, as an older install left it
        result = _run_with_umask_022(data_dir, WRITE_AND_FIND)
    finally:
        raw.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["readable"] == ""
