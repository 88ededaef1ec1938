from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from django.db import connections
from django.test.testcases import TransactionTestCase

from ledger import clock as clock_module
from ledger.actors import Actor

_triggers = importlib.import_module("ledger.migrations.0002_event_append_only")

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


_no_truncate_or_replace = importlib.import_module("ledger.migrations.0006_event_no_truncate_or_replace")
_task_counts = importlib.import_module("ledger.migrations.0012_task_counts")


def _sqlite_trigger_statements(*, create: bool) -> list[str]:
    return [
        *_triggers.statements("sqlite", create=create),
        *_no_truncate_or_replace.statements("sqlite", create=create),
        *_task_counts.statements("sqlite", create=create),
    ]


def _with_event_triggers_suspended(teardown):
    """Let Django flush the append-only event table between transactional tests.

    PostgreSQL flushes with TRUNCATE, which the statement trigger of
    `ledger.0006` refuses: it is disabled for the flush (row triggers do not
    see TRUNCATE). SQLite flushes with DELETE, which the trigger refuses (as it
    must in production), so the triggers are dropped for the flush and
    recreated right after; so are the task-count triggers of `ledger.0012`,
    whose DELETE rows would otherwise count the flushed tasks into the next
    test (TRUNCATE fires no row or DELETE trigger on PostgreSQL).
    """

    def wrapped(self: TransactionTestCase) -> None:
        opened = [c for c in connections.all() if c.connection is not None]
        for connection in opened:
            with connection.cursor() as cursor:
                if connection.vendor == "sqlite":
                    for sql in _sqlite_trigger_statements(create=False):
                        cursor.execute(sql)
                else:
                    cursor.execute("ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_no_truncate")
        try:
            teardown(self)
        finally:
            for connection in opened:
                with connection.cursor() as cursor:
                    if connection.vendor == "sqlite":
                        for sql in _sqlite_trigger_statements(create=True):
                            cursor.execute(sql)
                    else:
                        cursor.execute("ALTER TABLE ledger_event ENABLE TRIGGER ledger_event_no_truncate")

    return wrapped


TransactionTestCase._fixture_teardown = _with_event_triggers_suspended(  # type: ignore[attr-defined]
    TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]
)


@pytest.fixture(scope="session", autouse=True)
def _remove_sqlite_writer_lock_file(django_db_setup, django_db_blocker) -> Iterator[None]:
    """The test database's `<file>.writelock` (core.db) goes with the database at the end of the session."""
    name = str(connections["default"].settings_dict["NAME"])
    yield
    if connections["default"].vendor == "sqlite":
        Path(f"{name}.writelock").unlink(missing_ok=True)


DB_FIXTURES = frozenset({"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"})


@pytest.fixture(autouse=True)
def _every_written_event_type_is_declared(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the database: every event type in the table is an `EventType` (no drift)."""
    yield
    uses_db = DB_FIXTURES & set(request.fixturenames) or request.node.get_closest_marker("django_db")
    if not uses_db or request.node.get_closest_marker("undeclared_event_types"):
        return
    from ledger.models import Event, EventType

    written = set(Event.objects.values_list("type", flat=True).distinct())
    assert written <= set(EventType.values), f"undeclared event types: {sorted(written - set(EventType.values))}"


@pytest.fixture(autouse=True)
def _fresh_rate_limit_windows() -> None:
    """The throttles count in the process's cache (api/throttles.py): each test starts with empty windows."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def clock() -> Iterator[ModuleType]:
    """The one clock, frozen at START; move it with `clock.advance(seconds)`."""
    clock_module.freeze(START)
    yield clock_module
    clock_module.unfreeze()


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="pw-for-tests")


@pytest.fixture
def user_actor(admin_user) -> Actor:
    return Actor(user=admin_user)


@pytest.fixture
def project():
    """The project most room tests start from; a module or folder that needs others overrides it."""
    from tests.factories import ProjectFactory

    return ProjectFactory(slug="web")


@pytest.fixture
def agent(project):
    from tests.factories import AgentFactory

    return AgentFactory(handle="agent-07", projects=[project])
