"""The whole life of a lease over HTTP, as an agent author would drive it."""

from __future__ import annotations

import pytest

from leases.models import Attempt, AttemptStatus
from ledger.models import Task
from tests.api.conftest import assert_error, attempt_url, holder

pytestmark = pytest.mark.django_db


def test_claim_renew_checkpoint_context_finish(client, other_client, task, clock):
    claimed = client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 600}, format="json")
    assert claimed.status_code == 201
    claim = claimed.json()
    assert claim["epoch"] == 1
    assert claim["attempt"]["status"] == "active"
    assert claim["attempt"]["task"] == task.key
    assert claim["lease_expires_at"] == "2026-01-05T09:10:00Z"
    assert claim["renew_every_seconds"] == 200
    assert claim["renew_attempts"] == 3
    assert claim["label"].startswith("owner=agent-")
    assert claim["task"]["effective_status"] == "in_progress"
    assert claim["context"]["task"]["description"] == task.description
    assert len(claim["lease_token"]) >= 40

    taken = other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    error = assert_error(taken, 409, "TASK_TAKEN")
    assert error["details"]["holder"] == claim["task"]["holder"]

    clock.advance(300)
    renewed = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim))
    assert renewed.status_code == 200
    assert renewed.json() == {
        "lease_expires_at": "2026-01-05T09:15:00Z",
        "renew_count": 1,
        "task_status": "ready",
        "new_comments": 0,
    }

    note = client.post(
        attempt_url(claim, "notes"),
        {"kind": "checkpoint", "content": "Parser done; tests next.", "next_steps": ["write tests"]},
        format="json",
        **holder(claim),
    )
    assert note.status_code == 201
    assert note.json()["note"]["kind"] == "checkpoint"
    assert note.json()["lease_expires_at"] == "2026-01-05T09:15:00Z"

    context = client.get(f"/api/v1/tasks/{task.key}/context/")
    assert context.status_code == 200
    assert context.json()["latest_checkpoint"]["content"] == "Parser done; tests next."
    assert context.json()["label"] == claim["label"]

    finished = client.post(
        attempt_url(claim, "finish"), {"outcome": "done", "result_summary": "Fixed."}, format="json", **holder(claim)
    )
    assert finished.status_code == 200
    body = finished.json()
    assert body["attempt"]["status"] == "completed"
    assert body["task"]["status"] == "done"
    assert body["task"]["holder"] is None
    assert Task.objects.get(pk=task.pk).status == "done"
    # The finish's compact task is the list's row for it, lease columns and blocker count included.
    listed = client.get("/api/v1/tasks/").json()["results"]
    assert body["task"] == next(row for row in listed if row["key"] == task.key)

    again = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim))
    assert_error(again, 409, "LEASE_NOT_HELD")


def test_crash_recovery_fences_the_dead_agent(client, other_client, task, clock):
    dead = client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 60}, format="json").json()
    client.post(
        attempt_url(dead, "notes"), {"kind": "checkpoint", "content": "half way"}, format="json", **holder(dead)
    )

    clock.advance(61)  # the agent crashed; nobody cleans up
    listed = other_client.get("/api/v1/tasks/").json()["results"][0]
    assert listed["effective_status"] == "ready"

    rescue = other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    assert rescue.status_code == 201
    rescue_claim = rescue.json()
    assert rescue_claim["epoch"] == 2
    assert rescue_claim["context"]["latest_checkpoint"]["content"] == "half way"
    assert rescue_claim["context"]["previous_attempt"]["status"] == "expired"
    assert rescue_claim["attempt"]["branch"] == dead["attempt"]["branch"]  # inherited

    late = client.post(attempt_url(dead, "renew"), {}, format="json", **holder(dead))
    assert_error(late, 409, "STALE_EPOCH")
    late_note = client.post(
        attempt_url(dead, "notes"), {"kind": "progress", "content": "still here"}, format="json", **holder(dead)
    )
    assert_error(late_note, 409, "STALE_EPOCH")
    assert Attempt.objects.get(pk=dead["attempt"]["id"]).status == AttemptStatus.EXPIRED


def test_renewing_a_lapsed_lease_is_lease_expired_and_expires_the_attempt(client, task, clock):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 60}, format="json").json()
    clock.advance(61)
    assert_error(client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)), 409, "LEASE_EXPIRED")
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == AttemptStatus.EXPIRED


def test_claim_next_takes_the_highest_priority_and_answers_204_when_none_is_left(client, project, clock):
    from tests.factories import TaskFactory

    low = TaskFactory(project=project, priority=1)
    high = TaskFactory(project=project, priority=5)
    first = client.post("/api/v1/claims/next/", {"project": "web"}, format="json")
    assert first.status_code == 201
    assert first.json()["task"]["key"] == high.key
    second = client.post("/api/v1/claims/next/", {"project": "web"}, format="json")
    assert second.json()["task"]["key"] == low.key
    none = client.post("/api/v1/claims/next/", {"project": "web"}, format="json")
    assert none.status_code == 204
    assert none.content == b""


def test_release_gives_the_task_back(client, other_client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    released = client.post(attempt_url(claim, "release"), {"reason": "wrong task"}, format="json", **holder(claim))
    assert released.status_code == 200
    assert released.json()["attempt"]["status"] == "released"
    assert released.json()["task"]["effective_status"] == "ready"
    assert other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").status_code == 201


def test_failed_and_handoff_outcomes_need_their_reason(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    missing = client.post(attempt_url(claim, "finish"), {"outcome": "failed"}, format="json", **holder(claim))
    assert_error(missing, 400, "VALIDATION_ERROR")
    handoff = client.post(
        attempt_url(claim, "finish"),
        {"outcome": "handoff", "interruption_reason_code": "context_limit", "next_steps": ["continue"]},
        format="json",
        **holder(claim),
    )
    assert handoff.status_code == 200
    assert handoff.json()["attempt"]["status"] == "interrupted"
    assert handoff.json()["task"]["status"] == "ready"


def test_finish_after_the_task_changed_needs_an_acknowledgement(client, other_client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    edit = other_client.patch(
        f"/api/v1/tasks/{task.key}/", {"description": "New scope."}, format="json", HTTP_IF_MATCH="1"
    )
    assert edit.status_code == 200
    refused = client.post(attempt_url(claim, "finish"), {"outcome": "done"}, format="json", **holder(claim))
    error = assert_error(refused, 409, "ACKNOWLEDGEMENT_REQUIRED")
    assert error["details"]["current_version"] == 2
    done = client.post(
        attempt_url(claim, "finish"), {"outcome": "done", "acknowledged_version": 2}, format="json", **holder(claim)
    )
    assert done.status_code == 200


def test_holder_sets_branch_and_base_commit(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    answer = client.post(
        attempt_url(claim, "git"),
        {"branch": "fix/web-1-search-copy", "base_commit": "a" * 40},
        format="json",
        **holder(claim),
    )
    assert answer.status_code == 200
    attempt = answer.json()["attempt"]
    assert attempt["branch"] == "fix/web-1-search-copy"
    assert attempt["base_commit"] == "a" * 40
    assert "branch=fix/web-1-search-copy" in attempt["label"]
    bad = client.post(attempt_url(claim, "git"), {"branch": "Main"}, format="json", **holder(claim))
    assert_error(bad, 400, "INVALID_BRANCH_NAME")


def test_attempt_detail_lists_compact_notes(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    client.post(
        attempt_url(claim, "notes"), {"kind": "progress", "content": "x" * 5000}, format="json", **holder(claim)
    )
    detail = client.get(attempt_url(claim)).json()
    assert detail["notes_total"] == 1
    assert len(detail["notes"][0]["excerpt"]) == 300
    assert detail["notes"][0]["truncated"] is True
    assert detail["agent"] == claim["task"]["holder"]


def test_a_claim_can_allocate_an_environment(client, other_client, project):
    from tests.factories import EnvironmentFactory, TaskFactory

    EnvironmentFactory(project=project, name="preview-b", kind="database")
    first, second = TaskFactory(project=project), TaskFactory(project=project)
    claim = client.post(f"/api/v1/tasks/{first.key}/claim/", {"environment_kind": "database"}, format="json")
    assert claim.status_code == 201, claim.content
    body = claim.json()
    assert body["attempt"]["environment"] == "preview-b"
    assert "env=preview-b" in body["label"]
    assert body["context"]["environment"]["name"] == "preview-b"
    busy = other_client.post(f"/api/v1/tasks/{second.key}/claim/", {"environment": "preview-b"}, format="json")
    assert_error(busy, 409, "ENVIRONMENT_UNAVAILABLE")
    finished = client.post(attempt_url(body, "finish"), {"outcome": "review"}, format="json", **holder(body))
    assert finished.json()["attempt"]["environment"] == "preview-b"
    again = other_client.post(f"/api/v1/tasks/{second.key}/claim/", {"environment": "preview-b"}, format="json")
    assert again.status_code == 201
