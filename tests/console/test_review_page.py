"""A review request decided on its own page (issue 32): the worker's summary, checks at head, the diff, decisions."""

from __future__ import annotations

import pytest
from django.db import connection

from leases.models import ReviewRequest, ReviewStatus
from leases.services import attempt_finish, lease_claim
from ledger.models import Event, EventType, Task
from reconciliation.git import LocalRepository
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git

pytestmark = pytest.mark.django_db
REVIEWS = "/admin/leases/reviewrequest/"


@pytest.fixture
def world(tmp_path):
    return GitWorld(tmp_path / "git")


def open_review(world: GitWorld, *, content: str = "print('<b>hi</b> & bye')\n", repository: str | None = None):
    base = git("rev-parse", "main", cwd=world.clone)
    git("checkout", "-q", "-b", "fix/web-1", cwd=world.clone)
    head = world.commit_file("app.py", content, "the fix")
    git("checkout", "-q", "main", cwd=world.clone)
    project = ProjectFactory(slug="web", repository=str(world.clone) if repository is None else repository)
    worker = AgentFactory(handle="agent-07", projects=[project])
    task: Task = TaskFactory(project=project, title="Fix the copy")  # type: ignore[assignment]
    grant = lease_claim(task=task, agent=worker, branch="fix/web-1", base_commit=base)
    attempt_finish(
        proof=proof_of(grant),
        outcome="review",
        result_summary="Fixed the <copy>; added a test.",
        next_steps=["Check the footer"],
        git={"head_commit": head},
    )
    return ReviewRequest.objects.get(task=task)


def page_of(client, review: ReviewRequest) -> str:
    response = client.get(f"{REVIEWS}{review.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_page_shows_the_summary_the_checks_and_the_escaped_diff(ops_client, world):
    review = open_review(world)
    body = page_of(ops_client, review)
    assert "Fixed the &lt;copy&gt;; added a test." in body
    assert "Check the footer" in body
    assert 'id="lh-review-checks"' in body
    diff = body[body.index('id="lh-review-diff"') :]
    assert "+++ b/app.py" in diff
    assert "print(&#x27;&lt;b&gt;hi&lt;/b&gt; &amp; bye&#x27;)" in diff
    assert "<b>hi</b>" not in body
    assert 'id="lh-diff-truncated"' not in body
    for name in ("approve", "request_changes", "block"):
        assert f"{REVIEWS}{review.pk}/decide/{name}/" in body


def test_a_long_diff_is_cut_at_the_bound(ops_client, world, monkeypatch):
    monkeypatch.setattr("console.tasks.review_page.DIFF_MAX_BYTES", 2_000)
    review = open_review(world, content="".join(f"line {n}\n" for n in range(5_000)))
    body = page_of(ops_client, review)
    assert 'id="lh-diff-truncated"' in body
    assert "+line 10</span>" in body
    assert "+line 4999" not in body


def test_the_bounded_diff_stops_reading_at_the_bound(world):
    base = git("rev-parse", "main", cwd=world.clone)
    head = world.commit_file("big.txt", "x" * 50_000 + "\n", "big")
    diff = LocalRepository(str(world.clone)).bounded_diff(base, head, max_bytes=1_000)
    assert diff is not None
    assert diff.truncated
    assert len(diff.text.encode()) <= 1_000
    assert LocalRepository(str(world.clone)).bounded_diff("--output=/tmp/x", head, max_bytes=1_000) is None
    assert LocalRepository(str(world.clone)).bounded_diff("f" * 40, head, max_bytes=1_000) is None


def test_a_repository_the_server_cannot_read_says_so(ops_client, world):
    review = open_review(world, repository="https://example.invalid/web.git")
    body = page_of(ops_client, review)
    assert "is not a path on this server" in body


def test_the_diff_is_read_outside_any_transaction(ops_client, world, monkeypatch):
    from console.tasks import review_page

    seen: list[list[str]] = []
    real = review_page.review_diff

    def spy(review):
        seen.append(list(connection.savepoint_ids))
        return real(review)

    monkeypatch.setattr("console.tasks.reviews.review_diff", spy)
    review = open_review(world)
    # pytest-django wraps the test in the outermost transaction; any block the page opened would add a savepoint.
    assert connection.savepoint_ids == []
    page_of(ops_client, review)
    assert seen == [[]]


def test_requesting_changes_from_the_page(ops_client, world):
    review = open_review(world)
    url = f"{REVIEWS}{review.pk}/decide/request_changes/"
    form = ops_client.get(url).content.decode()
    assert "Request changes on 1 review" in form
    response = ops_client.post(url, {"post": "yes", "reason": "Almost.", "findings": "Add a test"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"{REVIEWS}{review.pk}/change/")
    decided = ReviewRequest.objects.get(pk=review.pk)
    assert (decided.status, decided.findings) == (ReviewStatus.CHANGES_REQUESTED, ["Add a test"])
    assert Task.objects.get(pk=review.task_id).status == "ready"
    assert Event.objects.filter(type=EventType.REVIEW_CHANGES_REQUESTED).count() == 1
    assert "/decide/" not in page_of(ops_client, decided)  # decided: no buttons


def test_approving_and_blocking_from_the_page(ops_client, world):
    review = open_review(world)
    response = ops_client.post(f"{REVIEWS}{review.pk}/decide/approve/", {"post": "yes", "reason": "Good."})
    assert response.status_code == 302
    assert ReviewRequest.objects.get(pk=review.pk).status == ReviewStatus.APPROVED
    assert ops_client.get(f"{REVIEWS}{review.pk}/decide/bogus/").status_code == 404
    assert ops_client.get(f"{REVIEWS}999999/decide/approve/").status_code == 404


def test_a_manager_reads_the_page_but_cannot_decide(manager_client, world):
    review = open_review(world)
    body = page_of(manager_client, review)
    assert "/decide/" not in body
    assert (
        manager_client.post(f"{REVIEWS}{review.pk}/decide/approve/", {"post": "yes", "reason": "x"}).status_code == 403
    )
    assert ReviewRequest.objects.get(pk=review.pk).status == ReviewStatus.OPEN


def test_the_task_in_review_links_to_its_request(ops_client, world):
    review = open_review(world)
    body = ops_client.get(f"/admin/ledger/task/{review.task_id}/change/").content.decode()
    assert f'href="{REVIEWS}{review.pk}/change/" id="lh-review-request"' in body
