"""The review loop over HTTP (SPEC §16.1): pinned requests, review attempts, decisions, stale targets."""

from __future__ import annotations

import pytest

from leases.models import Attempt, AttemptKind, AttemptStatus, ReviewRequest, ReviewStatus
from ledger.models import Event, EventType, Project, Task
from tests.api.conftest import assert_error, attempt_url, client_for, holder
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

HEAD = "a" * 40
MOVED_HEAD = "b" * 40


def finish(client, claim, outcome, **body):
    return client.post(attempt_url(claim, "finish"), {"outcome": outcome, **body}, format="json", **holder(claim))


def claim_and_finish_for_review(client, task, *, head=HEAD):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    finished = finish(client, claim, "review", result_summary="fixed the typo", git={"head_commit": head})
    assert finished.status_code == 200, finished.content
    assert finished.json()["task"]["status"] == "review"
    return claim


@pytest.mark.django_db
def test_the_review_loop_changes_requested_then_approved(client, other_client, project, task, agent, other_agent):
    # A finishes with `review`: a request pinned to the task's version and head commit.
    claim_and_finish_for_review(client, task)
    task.refresh_from_db()
    request = ReviewRequest.objects.get(task=task)
    assert (request.status, request.task_version, request.head_commit) == (ReviewStatus.OPEN, task.version, HEAD)
    listed = other_client.get("/api/v1/reviews/", {"project": project.slug, "status": "open"}).json()
    assert [item["id"] for item in listed["results"]] == [request.pk]

    # B claims it through /reviews/next/: a review attempt with its own lease, token and epoch.
    response = other_client.post("/api/v1/reviews/next/", {"project": project.slug}, format="json")
    assert response.status_code == 201, response.content
    review = response.json()
    assert review["epoch"] == 2
    assert review["review"]["id"] == request.pk
    assert review["context"]["review"]["head_commit"] == HEAD
    assert review["context"]["review"]["result_summary"] == "fixed the typo"
    attempt = Attempt.objects.get(pk=review["attempt"]["id"])
    assert (attempt.kind, attempt.agent_id) == (AttemptKind.REVIEW, other_agent.pk)
    shown = client.get(f"/api/v1/tasks/{task.key}/").json()
    assert shown["effective_status"] == "in_review"
    # Renewals and notes work as for any attempt.
    assert other_client.post(attempt_url(review, "renew"), {}, format="json", **holder(review)).status_code == 200
    note = {"kind": "finding", "content": "the copy test is missing"}
    assert other_client.post(attempt_url(review, "notes"), note, format="json", **holder(review)).status_code == 201

    # B requests changes with two findings: the task is ready again.
    findings = ["Add a test for the search copy.", "Fix the same typo in the footer."]
    decided = finish(other_client, review, "changes_requested", result_summary="Nearly.", findings=findings)
    assert decided.status_code == 200, decided.content
    assert decided.json()["task"]["status"] == "ready"
    assert decided.json()["attempt"]["status"] == AttemptStatus.COMPLETED
    request.refresh_from_db()
    assert (request.status, request.findings) == (ReviewStatus.CHANGES_REQUESTED, findings)

    # A's next claim lists the findings in its context.
    again = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").json()
    assert again["task"]["key"] == task.key
    assert again["context"]["review_findings"]["findings"] == findings
    assert again["context"]["review_findings"]["summary"] == "Nearly."
    finished = finish(client, again, "review", result_summary="added the test", git={"head_commit": MOVED_HEAD})
    assert finished.status_code == 200

    # B approves the new request: the task is done.
    second = other_client.post("/api/v1/reviews/next/", {"project": project.slug}, format="json").json()
    assert second["review"]["head_commit"] == MOVED_HEAD
    approved = finish(other_client, second, "approved", result_summary="LGTM")
    assert approved.status_code == 200, approved.content
    assert approved.json()["task"]["status"] == "done"
    statuses = dict(ReviewRequest.objects.filter(task=task).values_list("pk", "status"))
    assert sorted(statuses.values()) == [ReviewStatus.APPROVED, ReviewStatus.CHANGES_REQUESTED]
    types = list(Event.objects.filter(task=task, type__startswith="review.").values_list("type", flat=True))
    assert types == [
        EventType.REVIEW_REQUESTED,
        EventType.REVIEW_CLAIMED,
        EventType.REVIEW_CHANGES_REQUESTED,
        EventType.REVIEW_REQUESTED,
        EventType.REVIEW_CLAIMED,
        EventType.REVIEW_APPROVED,
    ]


@pytest.mark.django_db
def test_self_review_is_refused_unless_the_project_allows_it(client, project, task):
    claim_and_finish_for_review(client, task)
    request = ReviewRequest.objects.get(task=task)
    refused = client.post(f"/api/v1/reviews/{request.pk}/claim/", {}, format="json")
    error = assert_error(refused, 403, "PERMISSION_DENIED")
    assert error["details"]["reason"] == "self-review"
    # reviews/next never offers your own work.
    assert client.post("/api/v1/reviews/next/", {"project": project.slug}, format="json").status_code == 204
    Project.objects.filter(pk=project.pk).update(allow_self_review=True)
    assert client.post(f"/api/v1/reviews/{request.pk}/claim/", {}, format="json").status_code == 201


@pytest.mark.django_db
def test_a_review_whose_task_was_edited_is_stale_and_superseded(client, other_client, project, task, agent):
    claim_and_finish_for_review(client, task)
    request = ReviewRequest.objects.get(task=task)
    review = other_client.post(f"/api/v1/reviews/{request.pk}/claim/", {}, format="json").json()
    current = Task.objects.get(pk=task.pk).version
    edit = client.patch(
        f"/api/v1/tasks/{task.key}/", {"description": "Also the footer."}, format="json", HTTP_IF_MATCH=str(current)
    )
    assert edit.status_code == 200
    stale = finish(other_client, review, "approved", result_summary="LGTM")
    error = assert_error(stale, 409, "STALE_REVIEW_TARGET")
    assert "task_version" in error["details"]["moved"]
    request.refresh_from_db()
    assert request.status == ReviewStatus.SUPERSEDED
    assert Task.objects.get(pk=task.pk).status == "ready"  # the work goes on against the new text
    assert Attempt.objects.get(pk=review["attempt"]["id"]).status == AttemptStatus.RELEASED
    assert Event.objects.filter(task=task, type=EventType.REVIEW_SUPERSEDED).count() == 1


@pytest.mark.django_db
def test_approving_after_the_branch_head_moved_is_stale(client, other_client, task):
    claim_and_finish_for_review(client, task)
    request = ReviewRequest.objects.get(task=task)
    review = other_client.post(f"/api/v1/reviews/{request.pk}/claim/", {}, format="json").json()
    stale = finish(other_client, review, "approved", git={"head_commit": MOVED_HEAD})
    error = assert_error(stale, 409, "STALE_REVIEW_TARGET")
    assert error["details"]["moved"]["head_commit"] == {"requested": HEAD, "current": MOVED_HEAD}
    assert ReviewRequest.objects.get(pk=request.pk).status == ReviewStatus.SUPERSEDED


@pytest.mark.django_db
def test_blocking_needs_a_reason_and_blocks_the_task(client, other_client, task):
    claim_and_finish_for_review(client, task)
    review = other_client.post(
        f"/api/v1/reviews/{ReviewRequest.objects.get(task=task).pk}/claim/", {}, format="json"
    ).json()
    assert_error(finish(other_client, review, "blocked"), 400, "VALIDATION_ERROR")
    blocked = finish(other_client, review, "blocked", result_summary="Needs a product decision.")
    assert blocked.status_code == 200
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.blocked_reason) == ("blocked", "Needs a product decision.")


@pytest.mark.django_db
def test_findings_are_bounded_never_cut(client, other_client, task):
    claim_and_finish_for_review(client, task)
    review = other_client.post(
        f"/api/v1/reviews/{ReviewRequest.objects.get(task=task).pk}/claim/", {}, format="json"
    ).json()
    assert_error(finish(other_client, review, "changes_requested", findings=["x"] * 21), 400, "VALIDATION_ERROR")
    assert_error(finish(other_client, review, "changes_requested", findings=["x" * 501]), 400, "VALIDATION_ERROR")
    # A work attempt cannot decide, a review attempt cannot finish `done`.
    assert_error(finish(other_client, review, "done"), 400, "VALIDATION_ERROR")
    assert ReviewRequest.objects.get(task=task).status == ReviewStatus.IN_REVIEW


@pytest.mark.django_db
def test_a_review_attempt_that_lapses_leaves_the_review_claimable(client, other_client, project, task, clock):
    claim_and_finish_for_review(client, task)
    first = other_client.post("/api/v1/reviews/next/", {"project": project.slug}, format="json").json()
    clock.advance(first["renew_every_seconds"] * 3 + 1)
    third = client_for(AgentFactory(projects=[project]))
    again = third.post("/api/v1/reviews/next/", {"project": project.slug}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["epoch"] == first["epoch"] + 1
    assert Attempt.objects.get(pk=first["attempt"]["id"]).status == AttemptStatus.EXPIRED
    assert_error(finish(other_client, first, "approved"), 409, "STALE_EPOCH")


@pytest.mark.django_db(transaction=True)
def test_twenty_reviewers_racing_for_one_review_one_wins(clock):
    project = ProjectFactory(slug="race")
    worker = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    claim_and_finish_for_review(client_for(worker), task)
    reviewers = [client_for(AgentFactory(projects=[project])) for _ in range(20)]

    def race(index: int) -> int:
        return reviewers[index].post("/api/v1/reviews/next/", {"project": project.slug}, format="json").status_code

    results = run_in_threads(20, race)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert results.count(201) == 1, results
    assert set(results) <= {201, 204, 409}, results
    assert Attempt.objects.filter(task=task, kind=AttemptKind.REVIEW).count() == 1
    assert Event.objects.filter(task=task, type=EventType.REVIEW_CLAIMED).count() == 1


@pytest.mark.django_db
def test_a_review_of_a_task_reopened_meanwhile_lets_it_wait_from_the_release(
    client, other_client, task, clock, user_actor
):
    """The review attempt held the task (a live lease) after an admin reopened it to ready: when the
    decision is refused as stale and the attempt released, the task waits from then, as after any release."""
    from leases.services import task_update

    claim_and_finish_for_review(client, task)
    request = ReviewRequest.objects.get(task=task)
    review = other_client.post(f"/api/v1/reviews/{request.pk}/claim/", {}, format="json").json()
    task_update(task=Task.objects.get(pk=task.pk), actor=user_actor, changes={"status": "ready"})
    reopened_at = Task.objects.get(pk=task.pk).ready_since
    clock.advance(30)
    stale = finish(other_client, review, "approved", result_summary="LGTM")
    assert_error(stale, 409, "STALE_REVIEW_TARGET")
    assert Attempt.objects.get(pk=review["attempt"]["id"]).status == AttemptStatus.RELEASED
    stored = Task.objects.get(pk=task.pk)
    assert stored.status == "ready"
    assert stored.ready_since == clock.now() != reopened_at
