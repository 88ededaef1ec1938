"""Create the benchmark database and configure Django for it, once per process.

Each database runs in its own process (Django's settings are read once), so
`bench run --database both` starts one child per database; the SQLite
multi-process workload starts further children with the same environment.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
# One database per run (the process that runs one database's workloads), so two runs never share one.
PG_BENCH_DATABASE_PREFIX = "leasehold_bench_"
# Databases a run keeps on purpose (`python -m bench growth --keep`): a prefix of their own, so the cleanup of
# abandoned runs below never matches them, and a marker in their comment (`KEPT_MARKER`), so a kept database
# under any name survives it too. Drop them by hand (`DROP DATABASE`) when done.
PG_KEPT_DATABASE_PREFIX = "leasehold_kept_"
KEPT_MARKER = "leasehold-kept"
# Every agent thread holds a pooled connection for its lifetime, plus the main thread.
BENCH_POOL_MAX = 72


@dataclass(frozen=True)
class Target:
    """Where one database's run lives: the environment its processes (and the web server) get."""

    vendor: str  # "postgresql" or "sqlite"
    env: dict[str, str]
    dsn: str  # psycopg conninfo, or the SQLite file path

    @property
    def is_postgres(self) -> bool:
        return self.vendor == "postgresql"


def pg_admin_url() -> str:
    return os.environ.get("LEASEHOLD_BENCH_PG_ADMIN_URL", PG_ADMIN_URL)


def create_target(vendor: str, *, workdir: Path, database_name: str | None = None) -> Target:
    """A fresh, empty database of `vendor` (dropped and recreated) and the environment that points at it."""
    env = _base_env(workdir)
    if vendor == "postgresql":
        import psycopg

        database_name = database_name or f"{PG_BENCH_DATABASE_PREFIX}{os.getpid()}"
        admin = pg_admin_url()
        with psycopg.connect(admin, autocommit=True) as conn:
            _drop_abandoned(conn)
            conn.execute(f'DROP DATABASE IF EXISTS "{database_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{database_name}"')
        url = admin.rsplit("/", 1)[0] + "/" + database_name
        env["DATABASE_URL"] = url
        return Target(vendor=vendor, env=env, dsn=url)
    if vendor == "sqlite":
        path = workdir / "leasehold.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        env.pop("DATABASE_URL", None)
        return Target(vendor=vendor, env=env, dsn=str(path))
    raise ValueError(f"unknown database {vendor!r}")


def _base_env(workdir: Path) -> dict[str, str]:
    return {
        "LEASEHOLD_SECRET_KEY": os.environ.get("LEASEHOLD_SECRET_KEY") or secrets.token_urlsafe(48),
        "LEASEHOLD_DATA_DIR": str(workdir),
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "LEASEHOLD_DB_POOL_MAX": str(BENCH_POOL_MAX),
        # The bench measures the ledger, not the per-agent rate limit (api/throttles.py).
        "LEASEHOLD_AGENT_REQUESTS_PER_MINUTE": "0",
    }


def _drop_abandoned(conn: Any) -> None:
    """Drop the databases of earlier runs whose process is gone (a run killed before its cleanup).

    Only `leasehold_bench_<pid>` names, and never one whose comment carries `KEPT_MARKER` (a database kept
    on purpose, whatever its name)."""
    rows = conn.execute(
        "SELECT datname, coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname LIKE %s",
        [PG_BENCH_DATABASE_PREFIX.replace("_", r"\_") + "%"],
    )
    for name, comment in rows.fetchall():
        pid = name.removeprefix(PG_BENCH_DATABASE_PREFIX)
        if pid.isdigit() and not _alive(int(pid)) and KEPT_MARKER not in comment:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def existing_target(vendor: str, name: str) -> Target:
    """The environment of an existing database (PostgreSQL: its name on the admin URL's server; SQLite: the
    directory that holds its `leasehold.sqlite3`), created by nothing and dropped by nothing here."""
    if vendor == "postgresql":
        env = _base_env(Path(tempfile.mkdtemp(prefix="leasehold-bench-")))
        url = pg_admin_url().rsplit("/", 1)[0] + "/" + name
        env["DATABASE_URL"] = url
        return Target(vendor=vendor, env=env, dsn=url)
    if vendor == "sqlite":
        workdir = Path(name).resolve()
        return Target(vendor=vendor, env=_base_env(workdir), dsn=str(workdir / "leasehold.sqlite3"))
    raise ValueError(f"unknown database {vendor!r}")


def drop_target(target: Target) -> None:
    if target.is_postgres:
        import psycopg

        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{target.dsn.rsplit("/", 1)[1]}" WITH (FORCE)')


def configure_django(target: Target) -> None:
    """Point this process's Django at `target` and set it up (call before importing models)."""
    for name in ("DATABASE_URL",):
        os.environ.pop(name, None)
    os.environ.update(target.env)
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="leasehold-bench-"))
