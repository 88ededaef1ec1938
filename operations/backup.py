"""Backups of the whole database while it serves, checked before they count (SPEC §17, docs/operations.md).

- SQLite: the online backup API (`sqlite3.Connection.backup`) in one step,
  which reads one consistent snapshot; under WAL the server's writers go on
  meanwhile. The copy must pass `PRAGMA integrity_check`. (In steps, each
  step would release the snapshot, but a write by the server between two
  steps starts the copy over: a busy server's backup might never end.) The
  snapshot keeps what the writers append meanwhile in the WAL; the backup
  checkpoints and truncates it as soon as its snapshot ends (`core.sqlite_wal`).
- PostgreSQL: `pg_dump --format=custom`, then `pg_restore --list` must read
  the archive. `pg_dump` refuses a server of a newer major version; that is
  checked first and said plainly.

Every backup is written to `DEST.partial` and renamed to DEST only once it
passed its check, so DEST is never a half-written file. A backup holds
password hashes, session keys and webhook secrets: `DEST.partial` is created
here, mode 0600 whatever the umask, with `O_EXCL|O_NOFOLLOW`, so a file or
symlink planted under that name is refused rather than followed. Nothing here knows an
app; `operations.jobs.backup_job` runs `backup_rotate` daily when
`LEASEHOLD_BACKUP_DIR` is set.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sqlite3
import stat
import subprocess
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

from core.sqlite_wal import wal_checkpoint

SQLITE_SUFFIX = ".sqlite3"
POSTGRES_SUFFIX = ".pgdump"
BACKUP_NAME = re.compile(r"^leasehold-\d{8}T\d{6}Z(\.sqlite3|\.pgdump)$")
DUMP_TIMEOUT_SECONDS = 3600
PRIVATE_FILE_MODE = 0o600


# The triggers Leasehold's migrations create on SQLite: name → (app, migration that creates it, table).
# A backup of an older schema lacks the later ones (`migrate` adds them); any other trigger is foreign.
# tests/operations/test_backup.py checks this against a freshly migrated database.
SQLITE_TRIGGERS: dict[str, tuple[str, str, str]] = {
    "ledger_event_no_update": ("ledger", "0002_event_append_only", "ledger_event"),
    "ledger_event_no_delete": ("ledger", "0002_event_append_only", "ledger_event"),
    "ledger_event_no_replace": ("ledger", "0006_event_no_truncate_or_replace", "ledger_event"),
    "ledger_event_webhook_deliveries": ("ledger", "0011_webhooks", "ledger_event"),
    "ledger_task_count_insert": ("ledger", "0012_task_counts", "ledger_task"),
    "ledger_task_count_delete": ("ledger", "0012_task_counts", "ledger_task"),
    "ledger_task_count_update": ("ledger", "0012_task_counts", "ledger_task"),
    "leases_attempt_tally_insert": ("leases", "0011_rollups", "leases_attempt"),
    "leases_attempt_tally_update": ("leases", "0011_rollups", "leases_attempt"),
    "leases_event_tally_contested": ("leases", "0011_rollups", "ledger_event"),
    "leases_event_first_ready": ("leases", "0011_rollups", "ledger_event"),
    "ledger_task_fts_insert": ("leases", "0020_search_index", "ledger_task"),
    "ledger_task_fts_update": ("leases", "0020_search_index", "ledger_task"),
    "ledger_task_fts_delete": ("leases", "0020_search_index", "ledger_task"),
    "leases_note_fts_insert": ("leases", "0020_search_index", "leases_note"),
    "leases_note_fts_update": ("leases", "0020_search_index", "leases_note"),
    "leases_note_fts_delete": ("leases", "0020_search_index", "leases_note"),
    "leases_attempt_clock_insert": ("leases", "0022_lease_clock", "leases_attempt"),
    "leases_attempt_clock_update": ("leases", "0022_lease_clock", "leases_attempt"),
    "leases_attempt_lease_sample_insert": ("leases", "0019_lease_samples", "leases_attempt"),
    "leases_attempt_lease_sample_update": ("leases", "0019_lease_samples", "leases_attempt"),
    "ledger_task_lease_samples": ("leases", "0019_lease_samples", "ledger_task"),
    "leases_attempt_held_insert": ("leases", "0021_task_held", "leases_attempt"),
    "leases_attempt_held_update": ("leases", "0021_task_held", "leases_attempt"),
    # The report's rollup (insight/models/report_tally.py).
    "insight_attempt_report_insert": ("insight", "0003_report_tally", "leases_attempt"),
    "insight_attempt_report_update": ("insight", "0003_report_tally", "leases_attempt"),
    "insight_first_ready_report_insert": ("insight", "0003_report_tally", "leases_taskfirstready"),
    "insight_first_ready_report_update": ("insight", "0003_report_tally", "leases_taskfirstready"),
    "insight_task_report_update": ("insight", "0003_report_tally", "ledger_task"),
    # Agent health's latest checkpoint per agent (insight/models/agent_checkpoint.py).
    "insight_note_checkpoint_insert": ("insight", "0004_agent_checkpoint", "leases_note"),
    # Agent health's 7-day counts per agent and day (insight/models/agent_day_tally.py).
    "insight_attempt_agent_day_insert": ("insight", "0005_agent_day_tally", "leases_attempt"),
    "insight_attempt_agent_day_update": ("insight", "0005_agent_day_tally", "leases_attempt"),
}
# The event table's append-only triggers (SPEC §1.6) are compared word for word with their migrations' SQL.
APPEND_ONLY_MIGRATIONS = (
    "ledger.migrations.0002_event_append_only",
    "ledger.migrations.0006_event_no_truncate_or_replace",
)


class BackupRefused(Exception):
    """A backup or restore that cannot be done as asked; the message says why and what to do."""


def _check_destination(dest: Path) -> Path:
    if dest.exists() or dest.is_symlink():
        raise BackupRefused(f"{dest} exists; a backup never overwrites a file. Choose a new name.")
    parent = dest.parent
    if not parent.is_dir():
        raise BackupRefused(f"{parent} is not a directory.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BackupRefused(f"{parent} is not writable.")
    return dest.with_name(dest.name + ".partial")


def create_private_file(path: Path) -> None:
    """Create `path` empty and 0600, never following or reusing what is there (`O_CREAT|O_EXCL|O_NOFOLLOW`)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    except FileExistsError:
        raise BackupRefused(
            f"{path} exists (a file or link left there, or another backup under way); "
            "it is never followed or overwritten. Remove it or choose another name."
        ) from None
    except OSError as exc:
        raise BackupRefused(f"cannot create {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)  # the umask may have taken bits away; it never adds any
    finally:
        os.close(descriptor)


def _publish(partial: Path, dest: Path) -> None:
    """Rename the checked partial file to DEST, once it is still the private regular file created here."""
    status = os.lstat(partial)
    if not stat.S_ISREG(status.st_mode) or stat.S_IMODE(status.st_mode) != PRIVATE_FILE_MODE:
        raise BackupRefused(f"{partial} was replaced while the backup ran; nothing was published.")
    partial.rename(dest)


def integrity_problems(path: Path) -> list[str]:
    """What `PRAGMA integrity_check` reports for the SQLite file at `path` ([] when it is sound)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as check:
            rows = [row[0] for row in check.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def _normalized_trigger(sql: str) -> str:
    """A trigger's SQL as SQLite keeps it: `IF NOT EXISTS` and the final `;` dropped; whitespace collapsed here."""
    text = " ".join(sql.split()).removesuffix(";").strip()
    return text.replace("CREATE TRIGGER IF NOT EXISTS ", "CREATE TRIGGER ", 1)


def _append_only_triggers() -> dict[str, str]:
    found: dict[str, str] = {}
    for module in APPEND_ONLY_MIGRATIONS:
        for sql in importlib.import_module(module).SQLITE_CREATE:
            normalized = _normalized_trigger(sql)
            found[normalized.split()[2]] = normalized
    return found


def trigger_problems(path: Path) -> list[str]:
    """How the triggers of the SQLite database at `path` differ from what its applied migrations create.

    A restored database without the append-only triggers would let events be
    rewritten; a foreign trigger could do anything on every write. Both are
    refused ([] when the set is exactly the expected one).
    """
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as check:
            applied = set(check.execute("SELECT app, name FROM django_migrations"))
            triggers = check.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")
            present = {name: (table, sql) for name, table, sql in triggers}
    except sqlite3.DatabaseError as exc:
        return [f"its schema cannot be read: {exc}"]
    problems = [
        f"foreign trigger {name} on {table}"
        for name, (table, _) in sorted(present.items())
        if name not in SQLITE_TRIGGERS
    ]
    append_only = _append_only_triggers()
    for name, (app, migration, table) in SQLITE_TRIGGERS.items():
        if name not in present:
            if (app, migration) in applied:
                problems.append(f"trigger {name} on {table} is missing")
            continue
        if present[name][0] != table:
            problems.append(f"trigger {name} is on {present[name][0]}, not {table}")
        elif name in append_only and _normalized_trigger(present[name][1] or "") != append_only[name]:
            problems.append(f"trigger {name} is not the append-only trigger its migration creates")
    return problems


def backup_sqlite(*, source: Path, dest: Path) -> Path:
    """Copy the live SQLite database `source` to `dest` with the online backup API, then check the copy."""
    partial = _check_destination(dest)
    create_private_file(partial)
    try:
        with closing(sqlite3.connect(source, timeout=30)) as reader, closing(sqlite3.connect(partial)) as writer:
            reader.backup(writer)  # pages=-1: one step, one snapshot
            writer.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
            # The snapshot held back every frame written meanwhile: checkpoint them now, and cut the log back.
            wal_checkpoint(reader.cursor(), source, busy_timeout_ms=30_000)
        problems = integrity_problems(partial)
        if problems:
            raise BackupRefused(f"the copy failed PRAGMA integrity_check: {'; '.join(problems[:5])}")
        _publish(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def _major(version_text: str) -> int:
    found = re.search(r"(\d+)(?:\.\d+)?", version_text)
    if found is None:
        raise BackupRefused(f"cannot read a version from {version_text.strip()!r}")
    return int(found.group(1))


def _pg_environment(database: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    args = ["--dbname", str(database["NAME"])]
    for option, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if database.get(key):
            args += [option, str(database[key])]
    env = dict(os.environ)
    if database.get("PASSWORD"):
        env["PGPASSWORD"] = str(database["PASSWORD"])
    return args, env


def backup_postgres(*, database: dict[str, Any], server_major: int, dest: Path) -> Path:
    """`pg_dump --format=custom` of `database` (Django's settings dict) to `dest`, checked with `pg_restore --list`."""
    partial = _check_destination(dest)
    pg_dump, pg_restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    if pg_dump is None or pg_restore is None:
        missing = "pg_dump" if pg_dump is None else "pg_restore"
        raise BackupRefused(
            f"{missing} is not on PATH; install the PostgreSQL client programs, major version {server_major} "
            f"or newer (Debian: postgresql-client-{server_major})."
        )
    version = subprocess.run([pg_dump, "--version"], capture_output=True, text=True, check=False).stdout
    if _major(version) < server_major:
        raise BackupRefused(
            f"{version.strip()} cannot dump a PostgreSQL {server_major} server (pg_dump refuses a newer server); "
            f"install the client programs of version {server_major} or newer."
        )
    args, env = _pg_environment(database)
    create_private_file(partial)  # pg_dump writes into it: the file keeps its mode
    try:
        dumped = subprocess.run(
            [pg_dump, "--format=custom", "--no-password", "--file", str(partial), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=DUMP_TIMEOUT_SECONDS,
            check=False,
        )
        if dumped.returncode != 0:
            raise BackupRefused(f"pg_dump failed: {dumped.stderr.strip()[:2000]}")
        listed = subprocess.run([pg_restore, "--list", str(partial)], capture_output=True, text=True, check=False)
        if listed.returncode != 0 or "TABLE DATA" not in listed.stdout:
            raise BackupRefused(f"pg_restore --list cannot read the dump: {listed.stderr.strip()[:2000]}")
        _publish(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def backup_database(*, database: dict[str, Any], vendor: str, server_major: int, dest: Path) -> Path:
    """Back up the database Django's settings dict `database` names, by its vendor."""
    if vendor == "sqlite":
        return backup_sqlite(source=Path(database["NAME"]), dest=dest)
    if vendor == "postgresql":
        return backup_postgres(database=database, server_major=server_major, dest=dest)
    raise BackupRefused(f"Leasehold backs up SQLite and PostgreSQL, not {vendor}.")


def backup_rotate(
    *, database: dict[str, Any], vendor: str, server_major: int, directory: Path, keep: int, now: datetime
) -> tuple[Path, list[Path]]:
    """A timestamped backup in `directory`, then remove all but the newest `keep` backups there.

    Only files named like our own backups (`leasehold-YYYYmmddTHHMMSSZ.sqlite3|.pgdump`) are ever removed.
    Returns the new file and the removed ones.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    suffix = SQLITE_SUFFIX if vendor == "sqlite" else POSTGRES_SUFFIX
    made = backup_database(
        database=database,
        vendor=vendor,
        server_major=server_major,
        dest=directory / f"leasehold-{now.strftime('%Y%m%dT%H%M%SZ')}{suffix}",
    )
    ours = sorted((path for path in directory.iterdir() if BACKUP_NAME.match(path.name)), key=lambda p: p.name)
    removed = ours[:-keep] if keep > 0 else []
    for old in removed:
        old.unlink()
    return made, removed


def restore_sqlite(*, source: Path, data_dir: Path, database_name: str = "leasehold.sqlite3") -> Path:
    """Copy a SQLite backup into an empty data directory, after checking it; returns the new database file."""
    if not source.is_file():
        raise BackupRefused(f"{source} is not a file.")
    problems = integrity_problems(source)
    if problems:
        raise BackupRefused(f"{source} failed PRAGMA integrity_check: {'; '.join(problems[:5])}")
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as check:
        tables = {row[0] for row in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"django_migrations", "ledger_event", "ledger_task"} <= tables:
        raise BackupRefused(f"{source} is not a Leasehold database (no ledger tables).")
    if data_dir.exists() and any(data_dir.iterdir()):
        raise BackupRefused(f"{data_dir} is not empty; restore into an empty data directory.")
    problems = trigger_problems(source)
    if problems:
        raise BackupRefused(f"{source} does not carry Leasehold's triggers: {'; '.join(problems[:10])}")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = data_dir / database_name
    create_private_file(target)
    with (
        closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as reader,
        closing(sqlite3.connect(target)) as writer,
    ):
        reader.backup(writer)
    problems = integrity_problems(target)
    if problems:
        target.unlink()
        raise BackupRefused(f"the restored copy failed PRAGMA integrity_check: {'; '.join(problems[:5])}")
    return target


def _server_major() -> int:
    from django.db import connection

    if connection.vendor != "postgresql":
        return 0
    connection.ensure_connection()
    return int(connection.pg_version) // 10000  # type: ignore[attr-defined]


def backup_default_database(*, dest: Path) -> Path:
    """`backup_database` of Django's default database (the `backup` command)."""
    from django.db import connection

    return backup_database(
        database=connection.settings_dict, vendor=connection.vendor, server_major=_server_major(), dest=dest
    )


def backup_scheduled(*, directory: Path, keep: int, now: datetime) -> tuple[Path, list[Path]]:
    """`backup_rotate` of Django's default database (the daily job)."""
    from django.db import connection

    return backup_rotate(
        database=connection.settings_dict,
        vendor=connection.vendor,
        server_major=_server_major(),
        directory=directory,
        keep=keep,
        now=now,
    )
