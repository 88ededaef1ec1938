"""Environment providers for the tests (SPEC §23.3): real scripts that make and drop a real sandbox per attempt.

On the PostgreSQL lane (a postgres DATABASE_URL) a database per attempt, made with `createdb` and dropped with
`dropdb` on 127.0.0.1:5432 as user postgres, and looked up in `pg_database`; on SQLite-only lanes a directory
per attempt. Each provision script first checks that the runner recorded the attempt in its ledger: the record
comes before anything is made.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

SUITE_DATABASE = os.environ.get("DATABASE_URL", "")
ON_POSTGRES = SUITE_DATABASE.startswith(("postgres://", "postgresql://"))
PG = "-h 127.0.0.1 -p 5432 -U postgres"


@dataclass
class Backend:
    """A provider pair (and a failing provision) of one kind, and how to see whether a sandbox exists."""

    kind: str
    provision: Path
    teardown: Path
    failing_provision: Path
    prefix: str
    root: Path

    def name_of(self, attempt_id: int) -> str:
        return f"{self.prefix}{attempt_id}"

    def exists(self, attempt_id: int) -> bool:
        if self.kind == "database":
            import psycopg

            with psycopg.connect(SUITE_DATABASE, autocommit=True) as connection:
                found = connection.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (self.name_of(attempt_id),)
                ).fetchone()
            return found is not None
        return (self.root / self.name_of(attempt_id)).is_dir()

    def value_of(self, attempt_id: int) -> tuple[str, str]:
        """The provisioned field this backend fills and its value for the attempt."""
        if self.kind == "database":
            return "database_url", f"postgres://postgres@127.0.0.1:5432/{self.name_of(attempt_id)}"
        return "host_path", str(self.root / self.name_of(attempt_id))


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\nset -eu\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def backend(directory: Path, *, ledger: Path) -> Backend:
    """The lane's provider scripts, written into `directory`; `ledger` is the runner's provider ledger."""
    directory.mkdir(parents=True, exist_ok=True)
    prefix = f"lhprov_{os.getpid()}_"
    root = directory / "sandboxes"
    root.mkdir(exist_ok=True)
    recorded = f'test -f "{ledger}/$LEASEHOLD_ATTEMPT_ID.json" || {{ echo "not recorded first" >&2; exit 9; }}'
    if ON_POSTGRES:
        name = f'{prefix}"$LEASEHOLD_ATTEMPT_ID"'
        provision = f"""
            {recorded}
            createdb {PG} {name} >&2
            printf '{{"database_url": "postgres://postgres@127.0.0.1:5432/%s"}}\\n' {name}
        """
        failing = f"""
            createdb {PG} {name} >&2
            echo "could not configure {name}: no space left on device" >&2
            exit 3
        """
        teardown = f"dropdb {PG} --if-exists {name} >&2\n"
        kind = "database"
    else:
        path = f'"{root}/{prefix}$LEASEHOLD_ATTEMPT_ID"'
        provision = f"""
            {recorded}
            mkdir {path}
            printf '{{"host_path": "%s"}}\\n' {path}
        """
        failing = f"""
            mkdir {path}
            echo "could not fill {path}: no space left on device" >&2
            exit 3
        """
        teardown = f"rm -rf {path}\n"
        kind = "sandbox"
    return Backend(
        kind=kind,
        provision=_script(directory / "make-sandbox", provision),
        teardown=_script(directory / "drop-sandbox", teardown),
        failing_provision=_script(directory / "make-sandbox-badly", failing),
        prefix=prefix,
        root=root,
    )
