"""SPEC §25: SQLite's WAL is checkpointed and bounded while readers and backups hold snapshots (core.sqlite_wal)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from core import sqlite_wal
from core.sqlite_wal import wal_bytes
from leases.jobs import sweep_expired_job
from operations.backup import backup_sqlite

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="the write-ahead log is SQLite's")

LIMIT = 256 * 1024
SCRATCH = "scratch_wal_test"


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A WAL limit small enough to pass with a few writes; a scratch table to write them to."""
    monkeypatch.setattr(sqlite_wal, "SQLITE_WAL_LIMIT_BYTES", LIMIT)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {SCRATCH} (payload BLOB)")
    yield Path(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {SCRATCH}")


def write_past(limit: int) -> None:
    for _ in range(4 * limit // 65_536):
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {SCRATCH} (payload) VALUES (zeroblob(65536))")


def holding_a_snapshot(database: Path) -> sqlite3.Connection:
    reader = sqlite3.connect(database, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM ledger_task").fetchone()  # the snapshot starts at the first read
    return reader


@pytest.mark.django_db
def test_every_connection_cuts_its_wal_back_to_the_limit():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_size_limit")
        (limit,) = cursor.fetchone()
    assert limit == sqlite_wal.SQLITE_WAL_LIMIT_BYTES > 0


@pytest.mark.django_db(transaction=True)
def test_the_sweep_job_truncates_the_wal_once_the_snapshot_that_held_it_ends(small_limit):
    reader = holding_a_snapshot(small_limit)
    try:
        write_past(LIMIT)
        held = sweep_expired_job()["wal_checkpoint"]
        assert held["wal_bytes_after"] > LIMIT, "a reader's snapshot keeps its frames in the log"
        assert held["checkpointed"] < held["frames"]
        assert not held["truncated"]
    finally:
        reader.close()
    freed = sweep_expired_job()["wal_checkpoint"]
    assert freed["truncated"]
    assert freed["checkpointed"] == freed["frames"]
    assert freed["wal_bytes_after"] == 0
    assert wal_bytes(small_limit) < LIMIT  # the job's heartbeat was written after the checkpoint


@pytest.mark.django_db(transaction=True)
def test_a_backup_checkpoints_and_truncates_the_wal_its_snapshot_held(small_limit, tmp_path):
    write_past(LIMIT)
    assert wal_bytes(small_limit) > LIMIT
    backup_sqlite(source=small_limit, dest=tmp_path / "copy.sqlite3")
    assert wal_bytes(small_limit) == 0


@pytest.mark.django_db(transaction=True)
def test_a_wal_under_the_limit_is_checkpointed_but_left_its_size(small_limit):
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {SCRATCH} (payload) VALUES (zeroblob(1024))")
    report = sweep_expired_job()["wal_checkpoint"]
    assert report["checkpointed"] == report["frames"] > 0
    assert not report["truncated"]
    assert 0 < report["wal_bytes_after"] <= LIMIT
