"""Waiting for changes in-process (SPEC §18): `wait=` and the stream, through the test client (no parking worker).

Real commits from another thread wake the waiter through the process's event
watcher: LISTEN/NOTIFY on PostgreSQL, the short poll on SQLite. The parked
path under the real server is tests/api/test_changes_serve.py.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.selectors import feed_position
from ledger.services import event_append
from push.waiting import event_watcher
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory
from tests.push.watching import calls_while_quiet, listening_watcher

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    """Its LISTEN connection would keep PostgreSQL from dropping the test database."""
    yield
    event_watcher().stop()


def append_later(project, seconds: float) -> threading.Thread:
    def work():
        time.sleep(seconds)
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_a_waiter_answers_as_soon_as_an_event_commits():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    since = feed_position()
    writer = append_later(project, 0.5)
    started = time.monotonic()
    body = client.get(f"/api/v1/changes/?since={since}&wait=10").json()
    took = time.monotonic() - started
    writer.join()
    assert [event["type"] for event in body["events"]] == [EventType.TASK_UPDATED]
    assert 0.4 < took < 3.0
    assert body["latest_event_id"] == body["events"][0]["id"]


def test_a_waiter_with_nothing_new_answers_empty_after_its_wait():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    since = feed_position()
    started = time.monotonic()
    body = client.get(f"/api/v1/changes/?since={since}&wait=1").json()
    assert 0.9 < time.monotonic() - started < 3.0
    assert body == {"events": [], "latest_event_id": since, "has_more": False}


def test_events_of_a_project_the_waiter_cannot_see_neither_answer_nor_wake_it():
    mine, theirs = ProjectFactory(), ProjectFactory()
    client = client_for(AgentFactory(projects=[mine]))
    since = feed_position()
    other = append_later(theirs, 0.2)
    started = time.monotonic()
    body = client.get(f"/api/v1/changes/?since={since}&wait=1").json()
    other.join()
    assert body["events"] == []
    assert time.monotonic() - started > 0.9


def test_a_waiter_with_events_already_there_answers_at_once():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    started = time.monotonic()
    body = client.get("/api/v1/changes/?since=0&wait=30").json()
    assert body["events"]
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("wait", ["31", "-1", "x", "1.5"])
def test_wait_is_validated(wait):
    project = ProjectFactory()
    error = assert_error(
        client_for(AgentFactory(projects=[project])).get(f"/api/v1/changes/?wait={wait}"), 400, "VALIDATION_ERROR"
    )
    assert "wait" in str(error)


def test_the_watcher_wakes_on_a_real_commit_and_not_for_other_projects():
    mine, theirs = ProjectFactory(), ProjectFactory()
    watcher = event_watcher()
    position = feed_position()
    woken = threading.Event()
    unsubscribe = watcher.subscribe(since=position, projects=frozenset({mine.pk}), wake=woken.set)
    try:
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=mine.created_at, project=theirs)
        assert not woken.wait(0.5)
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=mine.created_at, project=mine)
        assert woken.wait(2.0)
    finally:
        unsubscribe()


def test_the_stream_sends_backlog_then_live_events_with_ids():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    first = Event.objects.filter(project=project).order_by("id").first()
    writer = append_later(project, 0.3)
    response = APIClient().get(
        f"/api/v1/changes/stream/?since={first.pk}",
        HTTP_AUTHORIZATION=f"Bearer {agent.api_token}",
        HTTP_ACCEPT="text/event-stream",
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    chunks = iter(response.streaming_content)
    received = b""
    deadline = time.monotonic() + 5
    while b"task.updated" not in received and time.monotonic() < deadline:
        received += next(chunks)
    writer.join()
    response.close()
    text = received.decode()
    assert text.startswith("retry: 3000\n\n")
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    expected = list(Event.objects.filter(project=project, id__gt=first.pk).order_by("id").values_list("id", flat=True))
    assert ids == expected
    assert "event: task.updated" in text


def test_the_stream_resumes_after_last_event_id():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    ids = list(Event.objects.filter(project=project).order_by("id").values_list("id", flat=True))
    response = APIClient().get(
        "/api/v1/changes/stream/?since=0",
        HTTP_AUTHORIZATION=f"Bearer {agent.api_token}",
        HTTP_LAST_EVENT_ID=str(ids[0]),
    )
    first = next(iter(response.streaming_content)).decode()
    response.close()
    assert [int(line[4:]) for line in first.splitlines() if line.startswith("id: ")] == ids[1:]


def test_a_bad_last_event_id_is_a_validation_error():
    agent = AgentFactory(projects=[ProjectFactory()])
    response = APIClient().get(
        "/api/v1/changes/stream/", HTTP_AUTHORIZATION=f"Bearer {agent.api_token}", HTTP_LAST_EVENT_ID="abc"
    )
    assert_error(response, 400, "VALIDATION_ERROR")


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the short poll is SQLite's")
def test_the_sqlite_poll_reads_the_event_table_only_after_a_commit(monkeypatch):
    """1,000 idle runner slots park 100 waiters per server process: a poll that finds nothing committed
    must cost no statement over the event table (`PRAGMA data_version`), and a commit is still heard."""
    import push.waiting

    reads: list[int] = []
    real = push.waiting._events_since
    monkeypatch.setattr(push.waiting, "_events_since", lambda last: reads.append(last) or real(last))
    project = ProjectFactory()
    with listening_watcher(project) as heard:
        # once the poll thread has read once: a second with nothing committed (several looks)
        assert (
            calls_while_quiet(reads, settle=2 * push.waiting.POLL_SECONDS, window=20 * push.waiting.POLL_SECONDS) == 0
        )
        before = len(reads)
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
        assert heard.wait(2.0)
        assert len(reads) > before
