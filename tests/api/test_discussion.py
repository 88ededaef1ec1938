"""Decisions and comments over HTTP (SPEC §16.2): bounded, evented, in the work context, in renewals."""

from __future__ import annotations

import pytest

from ledger.models import Decision, Event, EventType, TaskComment
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_decisions_are_created_listed_superseded_and_in_the_context(client, project, task, clock):
    made = client.post(
        "/api/v1/decisions/", {"project": project.slug, "title": "Use UTC", "body": "x" * 1000}, format="json"
    )
    assert made.status_code == 201, made.content
    first = made.json()
    assert len(first["body"]) == 1000
    about_task = client.post(
        "/api/v1/decisions/", {"project": project.slug, "task": task.key, "title": "Keep the old copy"}, format="json"
    ).json()
    page = client.get("/api/v1/decisions/", {"project": project.slug, "limit": 1}).json()
    assert [item["id"] for item in page["results"]] == [about_task["id"]]
    rest = client.get("/api/v1/decisions/", {"project": project.slug, "cursor": page["next_cursor"]}).json()
    assert [item["id"] for item in rest["results"]] == [first["id"]]
    assert len(rest["results"][0]["body"]) == 300  # compact
    context = client.get(f"/api/v1/tasks/{task.key}/context/").json()
    assert [d["title"] for d in context["decisions"]] == ["Keep the old copy", "Use UTC"]
    assert len(context["decisions"][1]["body"]) == 300
    assert "decisions.body" in context["truncated"]

    superseded = client.post(f"/api/v1/decisions/{first['id']}/supersede/", {"by": about_task["id"]}, format="json")
    assert superseded.status_code == 200
    assert superseded.json()["status"] == "superseded"
    assert client.get("/api/v1/decisions/", {"status": "active"}).json()["results"][0]["id"] == about_task["id"]
    again = client.post(f"/api/v1/decisions/{first['id']}/supersede/", {"by": about_task["id"]}, format="json")
    assert_error(again, 400, "VALIDATION_ERROR")
    assert Decision.objects.count() == 2
    assert Event.objects.filter(type__startswith="decision.").count() == 3


def test_long_input_is_refused_never_cut(client, project, task):
    assert_error(
        client.post("/api/v1/decisions/", {"project": project.slug, "title": "t" * 201}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(
        client.post("/api/v1/decisions/", {"project": project.slug, "title": "t", "body": "b" * 4001}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert_error(
        client.post(f"/api/v1/tasks/{task.key}/comments/", {"body": "c" * 8001}, format="json"), 400, "VALIDATION_ERROR"
    )
    assert_error(
        client.post(f"/api/v1/tasks/{task.key}/comments/", {"body": "c", "extra": 1}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert not TaskComment.objects.exists()


def test_a_comment_under_a_live_lease_is_counted_in_the_holders_renewals(client, other_client, project, clock):
    task = TaskFactory(project=project)
    other_client.post(f"/api/v1/tasks/{task.key}/comments/", {"body": "before the claim"}, format="json")
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    assert [c["body"] for c in claim["context"]["comments"]] == ["before the claim"]
    renew = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)).json()
    assert renew["new_comments"] == 0
    for body in ("please also fix the footer", "and the header"):
        posted = other_client.post(f"/api/v1/tasks/{task.key}/comments/", {"body": body}, format="json")
        assert posted.status_code == 201
    renew = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)).json()
    assert renew["new_comments"] == 2
    assert Event.objects.filter(task=task, type=EventType.TASK_COMMENTED).count() == 3
    listed = client.get(f"/api/v1/tasks/{task.key}/comments/", {"limit": 2}).json()
    assert [c["body"] for c in listed["results"]] == ["and the header", "please also fix the footer"]
    assert listed["next_cursor"] is not None


def test_the_context_carries_the_latest_five_comments_bounded(client, project, task):
    for index in range(7):
        client.post(f"/api/v1/tasks/{task.key}/comments/", {"body": f"{index} " + "y" * 3000}, format="json")
    context = client.get(f"/api/v1/tasks/{task.key}/context/").json()
    assert [c["body"][0] for c in context["comments"]] == ["2", "3", "4", "5", "6"]
    assert all(len(c["body"]) <= 1000 for c in context["comments"])
    assert "comments.body" in context["truncated"]
