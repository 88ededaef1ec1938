from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from core import sqlite_writer
from core.db import write_transaction
from core.errors import StorageBusy, ValidationFailed
from ledger.models import Project
from tests.concurrency import run_in_threads
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="exercises SQLite's write lock")
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="exercises PostgreSQL deadlock detection")


def test_domain_errors_are_never_retried():
    calls = []

    @write_transaction
    def refuse() -> None:
        calls.append(1)
        raise ValidationFailed("no")

    with pytest.raises(ValidationFailed):
        refuse()
    assert calls == [1]


def _hold_write_lock() -> sqlite3.Connection:
    raw = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
    raw.execute("BEGIN IMMEDIATE")
    return raw


@sqlite_only
def test_a_held_sqlite_lock_ends_in_storage_busy_after_bounded_retries():
    ProjectFactory(slug="locked")
    calls = []

    @write_transaction
    def rename() -> None:
        calls.append(1)
        Project.objects.filter(slug="locked").update(name="renamed")

    connection.ensure_connection()
    connection.cursor().execute("PRAGMA busy_timeout = 10")
    raw = _hold_write_lock()
    try:
        started = time.monotonic()
        with pytest.raises(StorageBusy) as caught:
            rename()
        elapsed = time.monotonic() - started
    finally:
        raw.rollback()
        raw.close()
    # BEGIN IMMEDIATE itself waits for the lock, so the body never ran.
    assert calls == []
    assert caught.value.details == {"attempts": 4}
    assert caught.value.retryable is True
    assert 0.3 <= elapsed < 3  # 25 + 75 + 200 ms of backoff, plus four 10 ms busy waits
    assert Project.objects.get(slug="locked").name != "renamed"


@sqlite_only
def test_the_whole_transaction_is_retried_once_the_lock_is_released():
    ProjectFactory(slug="brief")
    calls = []

    @write_transaction
    def rename() -> None:
        calls.append(1)
        Project.objects.filter(slug="brief").update(name="renamed")

    connection.ensure_connection()
    connection.cursor().execute("PRAGMA busy_timeout = 10")
    raw = _hold_write_lock()
    threading.Timer(0.05, raw.rollback).start()
    rename()
    raw.close()
    assert calls == [1]
    assert Project.objects.get(slug="brief").name == "renamed"


@postgres_only
def test_a_postgres_deadlock_is_retried_and_both_writers_succeed():
    first, second = ProjectFactory(slug="dl-a"), ProjectFactory(slug="dl-b")
    barrier = threading.Barrier(2)
    calls = []

    @write_transaction
    def cross(order: tuple[int, int]) -> None:
        calls.append(order)
        Project.objects.filter(pk=order[0]).update(name="x")
        if len(calls) <= 2:
            barrier.wait(timeout=10)
        Project.objects.filter(pk=order[1]).update(name="y")

    results = run_in_threads(2, lambda i: cross((first.pk, second.pk) if i == 0 else (second.pk, first.pk)))
    assert results == [None, None]
    # One of the two was chosen as the deadlock victim and ran again; under load its retry can take the
    # first row again before the survivor does and deadlock once more, so it may run more than once.
    assert len(calls) >= 3


@sqlite_only
def test_a_writer_waits_for_another_process_lock_only_as_long_as_the_budget(monkeypatch):
    """The file lock held elsewhere (another open file description, as another process has):
    STORAGE_BUSY after the budget, and writes work again once it is released."""
    ProjectFactory(slug="held")
    monkeypatch.setattr(sqlite_writer, "SQLITE_WRITER_WAIT_SECONDS", 0.3)

    @write_transaction
    def rename(name: str) -> None:
        Project.objects.filter(slug="held").update(name=name)

    other = os.open(f"{connection.settings_dict['NAME']}.writelock", os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(StorageBusy):
            rename("blocked")
        assert 0.25 <= time.monotonic() - started < 2
    finally:
        os.close(other)
    rename("after")  # the abandoned waiter took the lock and let it go
    assert Project.objects.get(slug="held").name == "after"


@sqlite_only
def test_writers_of_several_processes_queue_without_waiting_inside_sqlite():
    """4 processes of 4 threads, 1 ms busy timeout: nobody meets SQLite's busy handler, no write is lost."""
    project = ProjectFactory(slug="counter", queue_wait_max_seconds=0)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.qcluster_settings",
        "LEASEHOLD_QCLUSTER_TEST_DB": str(connection.settings_dict["NAME"]),
    }
    command = [sys.executable, "-m", "tests.core.sqlite_writers", "counter", "4", "40"]
    children = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [child.communicate(timeout=120)[0].split() for child in children]
    assert [child.returncode for child in children] == [0, 0, 0, 0]
    assert outputs == [["160", "0"]] * 4  # every write committed, no STORAGE_BUSY
    project.refresh_from_db()
    assert project.queue_wait_max_seconds == 640
