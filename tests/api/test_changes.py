"""The changes feed: every event exactly once, in id order, even while others write."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.selectors import changes_since, event_horizon
from ledger.services import event_append
from tests.api.conftest import assert_error, attempt_url, client_for, holder
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory


@pytest.mark.django_db
def test_changes_are_ascending_paged_and_scoped(client, task, project):
    first = client.get("/api/v1/changes/?limit=1").json()
    assert len(first["events"]) == 1
    assert first["has_more"] is True
    everything = client.get("/api/v1/changes/").json()
    assert everything["has_more"] is False
    ids = [event["id"] for event in everything["events"]]
    assert ids == sorted(ids)
    assert everything["latest_event_id"] == ids[-1]
    assert set(everything["events"][0]) == {
        "id",
        "type",
        "severity",
        "task",
        "attempt",
        "actor",
        "payload",
        "created_at",
    }
    nothing_new = client.get(f"/api/v1/changes/?since={ids[-1]}").json()
    assert nothing_new == {"events": [], "latest_event_id": ids[-1], "has_more": False}
    # agent.created has no project: an agent never sees it.
    assert EventType.AGENT_CREATED not in {event["type"] for event in everything["events"]}
    assert Event.objects.filter(type=EventType.AGENT_CREATED).exists()


@pytest.mark.django_db
def test_changes_filtered_by_project(client, agent, project):
    other = ProjectFactory(slug="other")
    agent.projects.add(other)
    TaskFactory(project=other)
    TaskFactory(project=project)
    only_other = client.get("/api/v1/changes/?project=other").json()["events"]
    assert {event["task"] for event in only_other if event["task"]} == {"OTHER-1"}


@pytest.mark.django_db(transaction=True)
def test_paging_while_others_write_yields_every_event_once_in_order(clock):
    project = ProjectFactory(slug="feed")
    writers = [AgentFactory(projects=[project]) for _ in range(3)]
    reader = AgentFactory(projects=[project])
    done = threading.Event()
    writer_count = len(writers)
    finished: list[int] = []
    reads_while_writing: list[int] = []
    lock = threading.Lock()

    def write(index: int) -> None:
        client = client_for(writers[index])
        for round_ in range(6):
            created = client.post(
                "/api/v1/tasks/", {"project": "feed", "title": f"w{index}-{round_}", "status": "ready"}, format="json"
            )
            assert created.status_code == 201, created.content
            claim = client.post(f"/api/v1/tasks/{created.json()['key']}/claim/", {}, format="json").json()
            client.post(
                attempt_url(claim, "notes"), {"kind": "progress", "content": "x"}, format="json", **holder(claim)
            )
            outcome = "done" if round_ % 2 else "failed"
            body = {"outcome": outcome} | ({"failure_reason_code": "tests_failed"} if outcome == "failed" else {})
            assert client.post(attempt_url(claim, "finish"), body, format="json", **holder(claim)).status_code == 200

    def read() -> list[int]:
        client = client_for(reader)
        seen: list[int] = []
        since = 0
        while True:
            writers_done = done.is_set()
            if not writers_done:
                reads_while_writing.append(since)
            page = client.get(f"/api/v1/changes/?since={since}&limit=5").json()
            seen += [event["id"] for event in page["events"]]
            since = page["latest_event_id"]
            if writers_done and not page["has_more"]:
                return seen

    def work(index: int):
        if index == writer_count:
            return read()
        try:
            return write(index)
        finally:
            with lock:
                finished.append(index)
                if len(finished) == writer_count:
                    done.set()

    results = run_in_threads(writer_count + 1, work)
    errors = [result for result in results if isinstance(result, BaseException)]
    assert errors == []
    seen = results[writer_count]
    expected = list(Event.objects.filter(project=project).order_by("id").values_list("id", flat=True))
    assert seen == expected  # every event, once, in id order
    assert len(reads_while_writing) > 1  # the reader really paged while the writers wrote
    types = set(Event.objects.filter(pk__in=seen).values_list("type", flat=True))
    assert {
        EventType.TASK_CREATED,
        EventType.ATTEMPT_CLAIMED,
        EventType.NOTE_ADDED,
        EventType.ATTEMPT_FINISHED,
        EventType.TASK_STATUS_CHANGED,
    } <= types


def _append(project, title: str) -> int:
    return event_append(
        type=EventType.PROJECT_CREATED, actor=SYSTEM, at=clock.now(), project=project, payload={"t": title}
    ).pk


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite draws and commits ids in one order")
@pytest.mark.django_db(transaction=True)
def test_an_event_that_commits_late_holds_the_feed_back_instead_of_being_skipped(clock):
    """PostgreSQL: a transaction that drew id n and commits after one that drew n+1.

    The later id commits without waiting (writers are not serialized), and the
    feed does not serve it until the earlier one has committed; nothing is skipped.
    """
    project = ProjectFactory(slug="late")
    before = changes_since(agent=None, since=0, limit=200)[0][-1]["id"]
    slow_has_id = threading.Event()
    release_slow = threading.Event()
    drawn: dict[str, int] = {}

    def slow() -> None:
        with transaction.atomic():
            drawn["slow"] = _append(project, "slow")
            slow_has_id.set()
            assert release_slow.wait(30)

    def work(index: int) -> None:
        if index == 0:
            slow()
            return
        assert slow_has_id.wait(30)
        with transaction.atomic():
            drawn["fast"] = _append(project, "fast")  # commits while `slow` is open: no global lock
        feed = changes_since(agent=None, since=before, limit=200)[0]
        drawn["served_while_open"] = len(feed)
        release_slow.set()

    results = run_in_threads(2, work, timeout=60)
    assert results == [None, None]
    assert drawn["fast"] > drawn["slow"]
    assert drawn["served_while_open"] == 0  # neither served: slow is running, fast is above its floor
    served = [row["id"] for row in changes_since(agent=None, since=before, limit=200)[0]]
    assert served == [drawn["slow"], drawn["fast"]]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_writer_does_not_hold_the_feed_back(clock):
    project = ProjectFactory(slug="gone")
    with transaction.atomic():
        kept = _append(project, "kept")
        try:
            with transaction.atomic():
                _append(project, "rolled back to its savepoint")
                raise RuntimeError
        except RuntimeError:
            pass
    assert transaction.get_connection().in_atomic_block is False

    def append_then_fail() -> None:
        with transaction.atomic():
            _append(project, "rolled back")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        append_then_fail()
    after = _append(project, "after")
    served = [row["id"] for row in changes_since(agent=None, since=kept - 1, limit=200)[0]]
    assert served == [kept, after]
    assert event_horizon() == (after if connection.vendor == "postgresql" else None)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="advisory locks are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_other_advisory_locks_neither_block_event_writers_nor_hold_the_feed_back(clock):
    project = ProjectFactory(slug="locks")
    last = _append(project, "before")
    foreign_held = threading.Event()
    release = threading.Event()
    seen: dict[str, int | None] = {}

    def work(index: int) -> None:
        if index == 0:  # another tool using advisory locks, with keys that look like ours
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s), pg_advisory_xact_lock_shared(1)", [last])
                foreign_held.set()
                assert release.wait(30)
            return
        assert foreign_held.wait(30)
        try:
            seen["written"] = _append(project, "while foreign locks are held")  # would wait on an untagged key
            seen["horizon"] = event_horizon()
        finally:
            release.set()

    assert run_in_threads(2, work, timeout=60) == [None, None]
    assert seen["horizon"] == seen["written"]


@pytest.mark.django_db
@pytest.mark.parametrize("wait", [0, 5])
def test_a_cursor_past_the_newest_event_is_refused_naming_the_newest(client, task, project, wait):
    newest = Event.objects.order_by("-id").values_list("id", flat=True).first()
    error = assert_error(client.get(f"/api/v1/changes/?since={newest + 1}&wait={wait}"), 400, "VALIDATION_ERROR")
    assert error["details"]["newest_event_id"] == newest
    assert str(newest) in error["message"]
    assert "since" in error["details"]["fields"]
    error = assert_error(client.get(f"/api/v1/changes/?since=999999&project={project.slug}"), 400, "VALIDATION_ERROR")
    assert error["details"]["newest_event_id"] == newest
    # The newest event itself, and the newest this agent can see, are cursors the feed answers.
    assert client.get(f"/api/v1/changes/?since={newest}").json()["events"] == []
    assert client.get(f"/api/v1/changes/?since={newest}").json()["latest_event_id"] == newest
