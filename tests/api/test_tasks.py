"""Task list (compact, filtered, cursor-paginated), create, read, update."""

from __future__ import annotations

import json

import pytest

from ledger.models import Event, EventType, Task
from tests.api.conftest import COMPACT_KEYS, assert_error, attempt_url, holder
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_compact_list_items_have_exactly_the_compact_fields(client, project, task):
    blocked = TaskFactory(project=project, blocked_by=[task], title="After the fix")
    body = client.get("/api/v1/tasks/").json()
    assert body["next_cursor"] is None
    assert [item["key"] for item in body["results"]] == [task.key, blocked.key]
    for item in body["results"]:
        assert set(item) == COMPACT_KEYS
    assert body["results"][1]["blocked_by"] == 1
    assert [item["claimable"] for item in body["results"]] == [True, False]
    assert "description" not in json.dumps(body)


def test_a_page_of_100_tasks_with_10_kb_descriptions_stays_under_32_kb(client, project, capsys):
    description = "Lorem ipsum dolor sit amet. " * 366  # ~10 KB
    assert len(description) > 10_000
    for number in range(100):
        TaskFactory(project=project, title=f"Task {number} of the budget test", description=description)
    response = client.get("/api/v1/tasks/?limit=100")
    assert len(response.json()["results"]) == 100
    size = len(response.content)
    with capsys.disabled():
        print(f"\n100-task compact page: {size} bytes")
    assert size < 32 * 1024
    assert size <= 25 * 1024  # the budget


def test_cursor_pagination_walks_every_task_once(client, project):
    keys = [TaskFactory(project=project).key for _ in range(7)]
    seen: list[str] = []
    url = "/api/v1/tasks/?limit=3"
    pages = 0
    while url:
        body = client.get(url).json()
        seen += [item["key"] for item in body["results"]]
        pages += 1
        url = f"/api/v1/tasks/?limit=3&cursor={body['next_cursor']}" if body["next_cursor"] else ""
    assert seen == keys
    assert pages == 3


def test_page_size_defaults_to_50_and_is_capped_at_200(client, project):
    for _ in range(51):
        TaskFactory(project=project)
    body = client.get("/api/v1/tasks/").json()
    assert len(body["results"]) == 50
    assert body["next_cursor"] is not None
    assert_error(client.get("/api/v1/tasks/?limit=201"), 400, "VALIDATION_ERROR")
    assert_error(client.get("/api/v1/tasks/?limit=0"), 400, "VALIDATION_ERROR")
    assert_error(client.get("/api/v1/tasks/?cursor=not-a-cursor"), 400, "VALIDATION_ERROR")


def test_filters(client, other_client, project):
    ready = TaskFactory(project=project, task_class="migration")
    draft = TaskFactory(project=project, status="open")
    held = TaskFactory(project=project)
    other_client.post(f"/api/v1/tasks/{held.key}/claim/", {}, format="json")

    def keys(query: str) -> list[str]:
        response = client.get(f"/api/v1/tasks/?{query}")
        assert response.status_code == 200, response.content
        return [item["key"] for item in response.json()["results"]]

    assert keys("status=open") == [draft.key]
    assert keys("status=open,ready") == [ready.key, draft.key, held.key]
    assert keys("effective_status=in_progress") == [held.key]
    assert keys("effective_status=ready") == [ready.key]
    assert keys("task_class=migration") == [ready.key]
    assert keys("claimable=true") == [ready.key]
    assert keys("claimable=true&project=web") == [ready.key]
    assert keys("claimable=false") == [draft.key, held.key]
    assert keys(f"q={ready.title.upper()}") == [ready.key]
    assert_error(client.get("/api/v1/tasks/?status=in_progress"), 400, "VALIDATION_ERROR")
    assert_error(client.get("/api/v1/tasks/?claimable=maybe"), 400, "VALIDATION_ERROR")
    assert_error(client.get("/api/v1/tasks/?project=nope"), 404, "NOT_FOUND")


def test_create_answers_the_full_task(client, task):
    response = client.post(
        "/api/v1/tasks/",
        {
            "project": "web",
            "title": "Write the docs",
            "description": "All of them.",
            "status": "ready",
            "priority": 3,
            "task_class": "docs",
            "labels": ["docs"],
            "blocked_by": [task.key],
        },
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["key"] == "WEB-2"
    assert body["version"] == 1
    assert body["description"] == "All of them."
    assert body["blocked_by"] == [{"key": task.key, "status": "ready", "effective_status": "ready"}]
    assert body["unresolved_blockers"] == 1
    assert Event.objects.filter(type=EventType.TASK_CREATED, task__key="WEB-2").exists()


def test_create_refuses_unknown_blockers_and_statuses(client, task):
    assert_error(
        client.post("/api/v1/tasks/", {"project": "web", "title": "x", "blocked_by": ["WEB-99"]}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(
        client.post("/api/v1/tasks/", {"project": "web", "title": "x", "status": "done"}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(
        client.post("/api/v1/tasks/", {"project": "web", "title": "x", "status": "blocked"}, format="json"),
        400,
        "VALIDATION_ERROR",
    )


def test_detail_is_full_with_an_etag(client, task):
    response = client.get(f"/api/v1/tasks/{task.key}/")
    assert response.status_code == 200
    assert response["ETag"] == '"1"'
    assert response.json()["description"] == task.description


def test_update_needs_a_version(client, task):
    error = assert_error(
        client.patch(f"/api/v1/tasks/{task.key}/", {"title": "t"}, format="json"), 400, "VALIDATION_ERROR"
    )
    assert "If-Match" in error["details"]["fields"]


def test_update_with_if_match_or_expected_version(client, task):
    first = client.patch(f"/api/v1/tasks/{task.key}/", {"title": "Renamed"}, format="json", HTTP_IF_MATCH='"1"')
    assert first.status_code == 200
    assert first.json()["version"] == 2
    assert first.json()["changed"] == ["title"]
    second = client.patch(f"/api/v1/tasks/{task.key}/", {"priority": 9, "expected_version": 2}, format="json")
    assert second.json()["version"] == 3
    stale = client.patch(f"/api/v1/tasks/{task.key}/", {"priority": 1}, format="json", HTTP_IF_MATCH="2")
    error = assert_error(stale, 409, "VERSION_CONFLICT")
    assert error["details"]["current_version"] == 3
    disagree = client.patch(
        f"/api/v1/tasks/{task.key}/", {"priority": 1, "expected_version": 2}, format="json", HTTP_IF_MATCH="3"
    )
    assert_error(disagree, 400, "VALIDATION_ERROR")
    bad_transition = client.patch(f"/api/v1/tasks/{task.key}/", {"status": "open"}, format="json", HTTP_IF_MATCH="3")
    assert bad_transition.status_code == 200
    refused = client.patch(f"/api/v1/tasks/{task.key}/", {"status": "review"}, format="json", HTTP_IF_MATCH="4")
    assert_error(refused, 400, "INVALID_STATUS_TRANSITION")


def test_a_holder_update_renews_the_lease(client, task, clock):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 600}, format="json").json()
    clock.advance(300)
    response = client.patch(
        f"/api/v1/tasks/{task.key}/",
        {"title": "Fix the search copy everywhere"},
        format="json",
        HTTP_IF_MATCH="1",
        HTTP_X_ATTEMPT_ID=str(claim["attempt"]["id"]),
        **holder(claim),
    )
    assert response.status_code == 200
    assert response.json()["lease_expires_at"] == "2026-01-05T09:15:00Z"
    assert not Event.objects.filter(type=EventType.TASK_CONTESTED).exists()


def test_a_holder_update_with_a_wrong_token_is_refused(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = client.patch(
        f"/api/v1/tasks/{task.key}/",
        {"title": "x", "attempt_id": claim["attempt"]["id"]},
        format="json",
        HTTP_IF_MATCH="1",
        HTTP_X_LEASE_TOKEN="wrong",
        HTTP_X_LEASE_EPOCH="1",
    )
    assert_error(response, 409, "INVALID_LEASE_TOKEN")
    no_attempt = client.patch(
        f"/api/v1/tasks/{task.key}/", {"title": "x"}, format="json", HTTP_IF_MATCH="1", **holder(claim)
    )
    assert_error(no_attempt, 400, "VALIDATION_ERROR")


def test_a_status_change_by_someone_else_is_contested_and_leaves_the_lease(client, other_client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = other_client.patch(
        f"/api/v1/tasks/{task.key}/",
        {"status": "blocked", "blocked_reason": "waiting"},
        format="json",
        HTTP_IF_MATCH="1",
    )
    assert response.status_code == 200
    assert response.json()["effective_status"] == "in_progress"
    contested = Event.objects.filter(type=EventType.TASK_CONTESTED)
    assert contested.count() == 1
    assert contested.get().severity == "warn"
    renew = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim))
    assert renew.status_code == 200
    assert Task.objects.get(pk=task.pk).status == "blocked"
