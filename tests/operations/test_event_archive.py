"""SPEC §25: events partitioned by month on PostgreSQL; a closed month archived, detached, and read back."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import cast

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from ledger.models import Agent, Event, EventType, Task
from operations.event_partitions import attached_partitions, ensure_partitions
from tests.factories import AgentFactory, TaskFactory

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite keeps one plain event table")

FIELDS = (
    "id",
    "project_id",
    "task_id",
    "attempt_id",
    "actor_agent_id",
    "actor_user_id",
    "type",
    "severity",
    "payload",
    "created_at",
)


def _scalar(sql: str) -> object:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def _january(clock, admin_user) -> list[tuple]:
    """January 2026's events (the clock starts on 2026-01-05), in their own partition."""
    made = ensure_partitions(now=clock.now())
    assert "ledger_event_p202601" in made.made
    agent = cast(Agent, AgentFactory(handle="archiver-07"))
    task = cast(Task, TaskFactory())
    Event.objects.create(
        type=EventType.TASK_UPDATED,
        project=task.project,
        task=task,
        actor_agent=agent,
        attempt_id=41,
        payload={"fields": ["title"]},
        created_at=clock.now(),
    )
    Event.objects.create(
        type=EventType.BUDGET_SET,
        project=task.project,
        actor_user=admin_user,
        severity="warn",
        payload={"note": "ünïcode"},
        created_at=clock.now(),
    )
    return list(Event.objects.filter(created_at__lt=datetime(2026, 2, 1, tzinfo=UTC)).values_list(*FIELDS))


@postgres_only
def test_a_closed_month_is_archived_detached_and_read_back_with_its_ids(clock, admin_user, tmp_path):
    january = _january(clock, admin_user)
    assert len(january) >= 3
    clock.freeze(datetime(2026, 2, 3, tzinfo=UTC))

    call_command("archive_events", "--before", "2026-02", str(tmp_path))

    path = tmp_path / "events-2026-01.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"type": "header", "format": 1, "archive": "events", "month": "2026-01"}
    assert json.loads(lines[-1])["counts"] == {"event": len(january)}
    assert date(2026, 1, 1) not in attached_partitions()
    assert _scalar("SELECT count(*) FROM ledger_event_archived_p202601") == len(january)
    assert not Event.objects.filter(id__in=[row[0] for row in january]).exists()
    record = Event.objects.get(type=EventType.EVENTS_ARCHIVED)
    assert record.payload["rows"] == len(january)
    assert record.payload["month"] == "2026-01"

    call_command("import_project", str(path))

    restored = list(Event.objects.filter(id__in=[row[0] for row in january]).order_by("id").values_list(*FIELDS))
    assert restored == january


@postgres_only
def test_a_rerun_archives_nothing_twice(clock, admin_user, tmp_path, capsys):
    _january(clock, admin_user)
    clock.freeze(datetime(2026, 2, 3, tzinfo=UTC))
    call_command("archive_events", "--before", "2026-02", str(tmp_path))
    call_command("archive_events", "--before", "2026-02", str(tmp_path))
    assert "Already archived: 2026-01." in capsys.readouterr().out
    assert Event.objects.filter(type=EventType.EVENTS_ARCHIVED).count() == 1


@postgres_only
def test_a_file_that_differs_from_the_partition_detaches_nothing(clock, admin_user, tmp_path):
    _january(clock, admin_user)
    clock.freeze(datetime(2026, 2, 3, tzinfo=UTC))
    (tmp_path / "events-2026-01.jsonl").write_text(
        '{"archive":"events","format":1,"month":"2026-01","type":"header"}\n'
        '{"counts":{"event":0},"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","type":"end"}\n'
    )
    with pytest.raises(CommandError, match="ARCHIVE_MISMATCH"):
        call_command("archive_events", "--before", "2026-02", str(tmp_path))
    assert date(2026, 1, 1) in attached_partitions()


@postgres_only
def test_the_open_month_is_refused(clock, tmp_path):
    with pytest.raises(CommandError, match="ARCHIVE_MONTH_OPEN"):
        call_command("archive_events", "--before", "2026-02", str(tmp_path))


@postgres_only
def test_the_archived_table_stays_append_only(clock, admin_user, tmp_path):
    _january(clock, admin_user)
    clock.freeze(datetime(2026, 2, 3, tzinfo=UTC))
    call_command("archive_events", "--before", "2026-02", str(tmp_path))
    for statement in (
        "UPDATE ledger_event_archived_p202601 SET type = 'forged'",
        "DELETE FROM ledger_event_archived_p202601",
        "SET CONSTRAINTS ALL IMMEDIATE; TRUNCATE ledger_event_archived_p202601",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)


@postgres_only
def test_every_partition_refuses_update_delete_and_truncate(clock):
    """Row triggers are cloned to every partition; each partition has its own TRUNCATE guard."""
    ensure_partitions(now=clock.now())
    TaskFactory()  # an event in January's partition
    clock.freeze(datetime(2030, 5, 1, tzinfo=UTC))
    TaskFactory()  # and one in the default partition (no partition for May 2030)
    partitions = [*attached_partitions().values(), "ledger_event_default"]
    holding = [p for p in partitions if _scalar(f"SELECT count(*) FROM {p}")]
    assert {"ledger_event_p202601", "ledger_event_default"} <= set(holding)
    statements = [f"SET CONSTRAINTS ALL IMMEDIATE; TRUNCATE {p}" for p in partitions]
    statements += [f"UPDATE {p} SET type = 'forged'" for p in holding] + [f"DELETE FROM {p}" for p in holding]
    for statement in statements:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    assert Event.objects.count() >= 2
    assert not Event.objects.filter(type="forged").exists()


@postgres_only
def test_a_month_whose_events_sit_in_the_default_partition_keeps_them_there(clock):
    clock.freeze(datetime(2025, 6, 10, tzinfo=UTC))
    TaskFactory()  # no partition for June 2025: the default one takes the event
    assert _scalar("SELECT count(*) FROM ledger_event_default") > 0
    result = ensure_partitions(now=clock.now(), months_ahead=1)
    assert "ledger_event_default" in result.refused["2025-06"]
    assert result.made == ["ledger_event_p202507"]
    assert Event.objects.filter(created_at__month=6).exists()


@postgres_only
def test_the_changes_feed_and_the_task_timeline_read_indexes_on_every_partition(clock):
    ensure_partitions(now=clock.now())
    task = TaskFactory()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in (
            Event.objects.filter(id__gt=0).order_by("id")[:100],
            Event.objects.filter(task=task).order_by("-id")[:50],
            Event.objects.filter(project=task.project, id__gt=0).order_by("id")[:100],
        ):
            plan = query.explain()
            assert "Seq Scan" not in plan, plan
            assert "Index" in plan, plan


def test_sqlite_refuses_to_archive_and_keeps_every_event(clock, tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL archives (the tests above)")
    TaskFactory()
    before = Event.objects.count()
    with pytest.raises(CommandError, match="ARCHIVE_NOT_SUPPORTED"):
        call_command("archive_events", "--before", "2026-01", str(tmp_path))
    assert Event.objects.count() == before
    assert list(tmp_path.iterdir()) == []


def test_a_malformed_month_is_refused(tmp_path):
    with pytest.raises(CommandError, match="VALIDATION_ERROR"):
        call_command("archive_events", "--before", "2026-13", str(tmp_path))
