"""The changes feed: every event exactly once, in id order, even while others write."""

from __future__ import annotations

import threading

import pytest

from ledger.models import Event
from tests.api.conftest import attempt_url, client_for, holder
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
    assert "agent.created" not in {event["type"] for event in everything["events"]}
    assert Event.objects.filter(type="agent.created").exists()


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
    assert {"task.created", "attempt.claimed", "note.added", "attempt.finished", "task.status_changed"} <= types
