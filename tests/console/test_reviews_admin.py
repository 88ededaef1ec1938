"""People review in the console (SPEC §16.1): the Reviews page, decisions through a confirmation
page and the same service; decisions admin; comments inline; release from quarantine (§16.4)."""

from __future__ import annotations

import pytest

from leases.models import ReviewRequest, ReviewStatus
from leases.services import attempt_finish, lease_claim
from ledger.actors import Actor
from ledger.models import Decision, Event, EventType, Task
from ledger.services import comment_add
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db
REVIEWS = "/admin/leases/reviewrequest/"
TASKS = "/admin/ledger/task/"


@pytest.fixture
def in_review(clock):
    project = ProjectFactory(slug="web")
    worker = AgentFactory(projects=[project])
    task = TaskFactory(project=project, title="Fix the copy")
    grant = lease_claim(task=task, agent=worker)
    attempt_finish(proof=proof_of(grant), outcome="review", result_summary="done", git={"head_commit": "c" * 40})
    return ReviewRequest.objects.get(task=task)


def test_the_reviews_page_lists_and_filters(ops_client, in_review):
    body = ops_client.get(REVIEWS, {"status__exact": "open"}).content.decode()
    assert in_review.task.key in body
    assert "Request changes" in body
    assert in_review.task.key not in ops_client.get(REVIEWS, {"status__exact": "approved"}).content.decode()


def test_requesting_changes_goes_through_a_confirmation_page(ops_client, in_review):
    data = {"action": "request_changes", "_selected_action": [in_review.pk], "index": 0}
    page = ops_client.post(REVIEWS, data).content.decode()
    assert "Request changes on 1 review" in page
    assert ReviewRequest.objects.get(pk=in_review.pk).status == ReviewStatus.OPEN  # nothing yet
    confirmed = {**data, "post": "yes", "reason": "Almost.", "findings": "Add a test\nFix the footer"}
    body = ops_client.post(REVIEWS, confirmed, follow=True).content.decode()
    assert "1 review sent back for changes" in body
    decided = ReviewRequest.objects.get(pk=in_review.pk)
    assert (decided.status, decided.findings, decided.summary) == (
        ReviewStatus.CHANGES_REQUESTED,
        ["Add a test", "Fix the footer"],
        "Almost.",
    )
    assert decided.reviewer_user.username == "ops"
    assert Task.objects.get(pk=in_review.task_id).status == "ready"
    assert Event.objects.filter(type=EventType.REVIEW_CHANGES_REQUESTED, actor_user__username="ops").count() == 1


def test_approving_a_moved_target_is_refused_and_supersedes(ops_client, in_review):
    task = in_review.task
    Task.objects.filter(pk=task.pk).update(version=task.version + 1)  # an edit the request did not see
    data = {"action": "approve", "_selected_action": [in_review.pk], "index": 0, "post": "yes", "reason": "ok"}
    body = ops_client.post(REVIEWS, data, follow=True).content.decode()
    assert "STALE_REVIEW_TARGET" in body
    assert ReviewRequest.objects.get(pk=in_review.pk).status == ReviewStatus.SUPERSEDED


def test_a_manager_cannot_decide(manager_client, in_review):
    data = {"action": "approve", "_selected_action": [in_review.pk], "index": 0, "post": "yes", "reason": "ok"}
    manager_client.post(REVIEWS, data, follow=True)
    assert ReviewRequest.objects.get(pk=in_review.pk).status == ReviewStatus.OPEN


def test_decisions_are_added_through_the_service_and_comments_show_on_the_task(ops_client, ledger_admin, in_review):
    response = ops_client.post(
        "/admin/ledger/decision/add/",
        {"project": in_review.task.project_id, "title": "Copy is British English", "body": "Always."},
        follow=True,
    )
    assert response.status_code == 200
    decision = Decision.objects.get()
    assert decision.author_user == ledger_admin
    assert Event.objects.filter(type=EventType.DECISION_CREATED).count() == 1
    comment_add(task=in_review.task, body="Looks risky", actor=Actor(user=ledger_admin))
    page = ops_client.get(f"{TASKS}{in_review.task_id}/change/").content.decode()
    assert "Looks risky" in page


def test_release_from_quarantine_action(ops_client, clock):
    project = ProjectFactory(slug="q", max_consecutive_failures=1)
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=agent)
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    assert Task.objects.get(pk=task.pk).status == "blocked"
    other = TaskFactory(project=project)
    data = {"action": "release_from_quarantine", "_selected_action": [task.pk, other.pk], "index": 0}
    body = ops_client.post(TASKS, data, follow=True).content.decode()
    assert "1 task released from quarantine" in body
    assert "1 task not quarantined" in body
    assert Task.objects.get(pk=task.pk).status == "ready"
