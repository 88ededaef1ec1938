"""The change listener's empty payload (issue 27): a statement that inserts no event sends no NOTIFY.

The lease sweep's `INSERT ... SELECT` runs every minute and usually inserts
nothing; the statement trigger then sent `NOTIFY ledger_event, ''`, the
listener's `_parse` raised on it, and the listener logged a traceback,
reconnected and woke every waiter, once a minute.
"""

from __future__ import annotations

import pytest
from django.db import connection

from ledger.actors import SYSTEM
from ledger.models import EventType
from ledger.services import event_append
from push.waiting import _parse, _parse_types
from tests.factories import ProjectFactory


def test_an_empty_payload_wakes_no_one_and_raises_nothing():
    assert _parse("") is None
    assert _parse(" ") is None
    assert _parse("42 3,0") == {3: 42, 0: 42}
    assert _parse("42 *") == 42
    payload = f"42 3,0 3:{EventType.TASK_CREATED},0:{EventType.AGENT_CREATED},3:{EventType.NOTE_ADDED}"
    assert _parse(payload) == {3: 42, 0: 42}
    assert _parse_types(payload) == {
        3: frozenset({EventType.TASK_CREATED, EventType.NOTE_ADDED}),
        0: frozenset({EventType.AGENT_CREATED}),
    }
    assert _parse_types("42 3,0 ") is None  # the types left out (too many): any type may have committed
    assert _parse_types("42 3,0") is None  # the trigger before ledger.0015


@pytest.mark.django_db(transaction=True)
def test_an_insert_of_no_row_sends_no_notification_and_an_event_sends_its_own():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite's watcher polls")
    import psycopg

    project = ProjectFactory()
    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute("LISTEN ledger_event")
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_event (type, severity, payload, created_at) "
                "SELECT 'task.updated', 'info', '{}'::jsonb, now() WHERE false"
            )
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
        event = event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
        assert [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)] == [
            f"{event.id} {project.pk} {project.pk}:task.updated"  # the types since ledger.0015 (SPEC §25)
        ]
