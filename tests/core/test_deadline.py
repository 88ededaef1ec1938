"""Storage waits end by the request's deadline; a lost connection is retried once (issue 14, findings 2 and 3)."""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pytest
from django.db import connection

from core.db import write_transaction
from core.deadline import storage_deadline
from core.errors import StorageBusy
from ledger.models import Project
from tests.factories import ProjectFactory

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="exercises SQLite's write lock")
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="exercises PostgreSQL connections")


@write_transaction
def _rename(slug: str, calls: list[int]) -> None:
    calls.append(1)
    Project.objects.filter(slug=slug).update(name="renamed")


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_sqlite_lock_held_outside_ends_in_storage_busy_by_the_deadline():
    """Without the deadline this waits 4 x 5 s of SQLite's busy timeout (and past a worker timeout with more)."""
    ProjectFactory(slug="locked")
    outside = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    outside.execute("BEGIN IMMEDIATE")
    calls: list[int] = []
    try:
        started = time.monotonic()
        with pytest.raises(StorageBusy) as caught, storage_deadline(1.0):
            _rename("locked", calls)
        elapsed = time.monotonic() - started
    finally:
        outside.rollback()
        outside.close()
    assert caught.value.retryable is True
    assert 0.9 <= elapsed < 2.0
    assert calls == []
    _rename("locked", calls)  # the lock is gone: writes resume, busy timeout restored
    assert Project.objects.get(slug="locked").name == "renamed"


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_postgres_row_lock_held_outside_ends_in_storage_busy_by_the_deadline():
    ProjectFactory(slug="locked")
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone() == ("20s",)  # from LEASEHOLD_STORAGE_DEADLINE_SECONDS
        cursor.execute("SET lock_timeout = '500ms'")
    settings = connection.settings_dict
    outside = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"], autocommit=False
    )
    outside.execute("SELECT 1 FROM ledger_project WHERE slug = 'locked' FOR UPDATE")
    calls: list[int] = []
    try:
        started = time.monotonic()
        with pytest.raises(StorageBusy), storage_deadline(1.2):
            _rename("locked", calls)
        elapsed = time.monotonic() - started
    finally:
        outside.rollback()
        outside.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert 1.0 <= elapsed < 2.5
    assert Project.objects.get(slug="locked").name != "renamed"


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_write_on_a_connection_the_server_dropped_runs_again_on_a_fresh_one():
    ProjectFactory(slug="dropped")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"], autocommit=True
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.1)  # the backend's exit is asynchronous to the call that asked for it
    calls: list[int] = []

    _rename("dropped", calls)

    assert calls == [1, 1]  # the first try met the dead connection, the second committed
    assert Project.objects.get(slug="dropped").name == "renamed"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone() != (pid,)
