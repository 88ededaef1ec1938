"""The round trip across engines: this test database → SQLite → PostgreSQL → SQLite again (SPEC §17).

Each hop is `manage.py import_project` then `export_project` in a real process on a database of its own.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ledger.models import Project
from operations.transfer.export import project_export
from tests.operations.transfer.scenario import build_project, lines_of, normalized

ROOT = Path(__file__).resolve().parents[3]
POSTGRES = os.environ.get("LEASEHOLD_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")

pytestmark = pytest.mark.django_db


def _env(data_dir: Path, database_url: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_DATA_DIR": str(data_dir),
            "LEASEHOLD_SECRET_KEY": "test-secret-key-for-the-round-trip-0123456789",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@contextmanager
def _postgres_database(name: str) -> Iterator[str]:
    import psycopg

    database = f"{name}_{os.getpid()}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield POSTGRES.rsplit("/", 1)[0] + "/" + database
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _hop(env: dict[str, str], source: Path, dest: Path, *extra: str) -> str:
    _manage(env, "import_project", str(source), *extra)
    slug = extra[extra.index("--as") + 1] if "--as" in extra else "src"
    _manage(env, "export_project", slug, "--output", str(dest))
    return dest.read_text()


def test_export_imports_exactly_into_sqlite_then_postgresql_and_back(admin_user, tmp_path):
    build_project(admin_user)
    out = io.StringIO()
    project_export(project=Project.objects.get(slug="src"), out=out)
    first = tmp_path / "from-test-db.jsonl"
    first.write_text(out.getvalue())

    sqlite_env = _env(tmp_path / "sqlite")
    (tmp_path / "sqlite").mkdir()
    _manage(sqlite_env, "migrate", "--verbosity", "0")
    with _postgres_database("transfer_across") as url:
        postgres_env = _env(tmp_path / "pg", url)
        (tmp_path / "pg").mkdir()
        _manage(postgres_env, "migrate", "--verbosity", "0")
        in_sqlite = _hop(sqlite_env, first, tmp_path / "from-sqlite.jsonl")
        in_postgres = _hop(postgres_env, tmp_path / "from-sqlite.jsonl", tmp_path / "from-postgres.jsonl")
    back = _hop(
        sqlite_env, tmp_path / "from-postgres.jsonl", tmp_path / "back.jsonl", "--as", "back", "--key-prefix", "BACK"
    )

    expected = normalized(first.read_text())
    assert normalized(in_sqlite) == expected
    assert normalized(in_postgres) == expected
    assert normalized(back, ("SRC",)) == expected
    # Between the two fresh databases only ids may differ: the same keys, slug, text and timestamps.
    assert [row.get("key") for row in lines_of(in_postgres)] == [row.get("key") for row in lines_of(first.read_text())]
