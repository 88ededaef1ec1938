"""A full disk or a storage error answers `STORAGE_BUSY` (retryable), logged once per burst (issue 27, M6).

SQLite's `PRAGMA max_page_count` makes the database "full" as a filled disk
would: every write that needs a new page fails with "database or disk is
full". Nothing was written, so the client may retry later.
"""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError, connection

from api.errors import as_ledger_error
from leases.models import Note
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import TaskFactory

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="fills SQLite's file with max_page_count")


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_full_sqlite_database_answers_storage_busy_and_logs_one_line_per_burst(client, project, caplog):
    task = TaskFactory(project=project)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM")  # no free pages left over from earlier tests: every new row needs a new page
        cursor.execute("PRAGMA page_count")
        (pages,) = cursor.fetchone()
        cursor.execute(f"PRAGMA max_page_count = {pages}")
    try:
        with caplog.at_level(logging.INFO):
            for n in range(3):
                response = client.post(
                    attempt_url(claim, "notes"), {"kind": "progress", "content": f"{n}" + "x" * 7900}, **holder(claim)
                )
                error = assert_error(response, 503, "STORAGE_BUSY")
                assert error["retryable"] is True
                assert "disk full" in error["message"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA max_page_count = 1073741823")
    records = [record for record in caplog.records if "storage fault" in record.getMessage()]
    assert len(records) == 1, [record.getMessage() for record in caplog.records]
    assert "database or disk is full" in records[0].getMessage()
    assert records[0].exc_info is None  # one line, no traceback
    # Django's own "Service Unavailable" line is dropped by the console handler's filter (tests/config/test_logs.py).
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name != "django.request"]
    assert not Note.objects.exists()
    # Space again: the same write goes through.
    response = client.post(attempt_url(claim, "notes"), {"kind": "progress", "content": "after"}, **holder(claim))
    assert response.status_code == 201, response.content[:300]


class _PostgresCause(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__("could not extend file")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate", ["53100", "58030"])
def test_postgresql_disk_full_and_io_errors_are_storage_busy(sqlstate):
    error = OperationalError("could not extend file: No space left on device")
    error.__cause__ = _PostgresCause(sqlstate)
    assert as_ledger_error(error)[0].code == "STORAGE_BUSY"


@pytest.mark.parametrize("message", ["disk I/O error", "database or disk is full"])
def test_sqlite_storage_errors_are_storage_busy(message):
    assert as_ledger_error(OperationalError(message))[0].code == "STORAGE_BUSY"


def test_other_operational_errors_stay_internal():
    assert as_ledger_error(OperationalError("no such table: nope"))[0].code == "INTERNAL_ERROR"
