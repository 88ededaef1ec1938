"""Git facts over HTTP (SPEC §15.4): `POST /attempts/{id}/git/` and finish's `git`, shown wherever the attempt is."""

from __future__ import annotations

from datetime import datetime

import pytest

from leases.models import Attempt
from ledger.models import EventType
from tests.api.conftest import assert_error, attempt_url, holder

pytestmark = pytest.mark.django_db

BASE = "b" * 40
HEAD = "c" * 40
FACTS = {
    "head_commit": HEAD,
    "commits_ahead": 2,
    "dirty": False,
    "pushed": True,
    "worktree_path": "/home/dev/web.worktrees/WEB-1",
    "host": "box-a",
}


def claim_of(client, task, **body) -> dict:
    response = client.post(f"/api/v1/tasks/{task.key}/claim/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_recorded_facts_are_in_the_answer_the_attempt_view_and_the_feed(client, task):
    claim = claim_of(client, task)
    assert {name: claim["attempt"][name] for name in FACTS} == dict.fromkeys(FACTS)
    response = client.post(attempt_url(claim, "git"), {"base_commit": BASE, **FACTS}, format="json", **holder(claim))
    assert response.status_code == 200, response.content
    shown = response.json()["attempt"]
    assert {name: shown[name] for name in FACTS} == FACTS
    assert shown["base_commit"] == BASE
    detail = client.get(attempt_url(claim)).json()
    assert {name: detail[name] for name in FACTS} == FACTS
    events = client.get("/api/v1/changes/?since=0").json()["events"]
    (updated,) = [event for event in events if event["type"] == EventType.ATTEMPT_UPDATED]
    assert updated["payload"] == {"base_commit": BASE, **FACTS}


def test_the_context_shows_the_holders_git_facts(client, task):
    claim = claim_of(client, task, branch="feature/search-copy")
    assert claim["context"]["git"]["branch"] == "feature/search-copy"
    assert claim["context"]["predecessor_work"] is None
    client.post(attempt_url(claim, "git"), FACTS, format="json", **holder(claim))
    context = client.get(f"/api/v1/tasks/{task.key}/context/").json()
    assert context["git"] == {"branch": "feature/search-copy", "base_commit": None, **FACTS}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("head_commit", "abc"),
        ("head_commit", "A" * 40),
        ("base_commit", "nothex" * 7),
        ("commits_ahead", -1),
        ("commits_ahead", 2**31),
        ("commits_ahead", "many"),
        ("dirty", "perhaps"),
        ("pushed", [True]),
        ("worktree_path", "relative/dir"),
        ("worktree_path", "/" + "p" * 500),
        ("host", "h" * 201),
        ("host", ""),
        ("sha", HEAD),
    ],
)
def test_a_bad_or_unknown_fact_is_a_validation_error_naming_it(client, task, field, value):
    claim = claim_of(client, task)
    response = client.post(attempt_url(claim, "git"), {field: value}, format="json", **holder(claim))
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert list(error["details"]["fields"]) == [field]
    assert client.get(attempt_url(claim)).json()["head_commit"] is None


def test_a_git_call_with_no_fact_is_refused(client, task):
    claim = claim_of(client, task)
    assert_error(client.post(attempt_url(claim, "git"), {}, format="json", **holder(claim)), 400, "VALIDATION_ERROR")


def test_a_git_call_whose_facts_are_all_null_reports_nothing_and_renews(client, task, clock):
    """The schema lets each fact added in SPEC §15.4 be null ("not reported"): a report of only
    nulls is valid, so it is answered (a renewal, not work), never refused."""
    claim = claim_of(client, task)
    clock.advance(60)
    nulls = dict.fromkeys(FACTS)
    response = client.post(attempt_url(claim, "git"), nulls, format="json", **holder(claim))
    assert response.status_code == 200, response.content
    attempt = Attempt.objects.get(pk=claim["attempt"]["id"])
    assert attempt.lease_expires_at > datetime.fromisoformat(claim["attempt"]["lease_expires_at"])
    assert attempt.last_renewed_at == clock.now()
    assert attempt.last_worked_at != clock.now()
    assert {name: response.json()["attempt"][name] for name in FACTS} == nulls
    events = client.get("/api/v1/changes/?since=0").json()["events"]
    assert EventType.ATTEMPT_UPDATED not in [event["type"] for event in events]


def test_finish_records_its_git_object(client, task):
    claim = claim_of(client, task)
    body = {"outcome": "failed", "failure_reason_code": "tests_failed", "git": FACTS}
    response = client.post(attempt_url(claim, "finish"), body, format="json", **holder(claim))
    assert response.status_code == 200, response.content
    shown = response.json()["attempt"]
    assert shown["status"] == "failed"
    assert {name: shown[name] for name in FACTS} == FACTS


@pytest.mark.parametrize(("git", "field"), [({"commits_ahead": -3}, "commits_ahead"), ({"ahead": 3}, "ahead")])
def test_finish_refuses_a_bad_git_object_and_the_attempt_goes_on(client, task, git, field):
    claim = claim_of(client, task)
    response = client.post(
        attempt_url(claim, "finish"), {"outcome": "done", "git": git}, format="json", **holder(claim)
    )
    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert list(error["details"]["fields"]["git"]) == [field]
    assert client.get(attempt_url(claim)).json()["status"] == "active"


def test_a_git_call_is_idempotent_under_its_key(client, task):
    claim = claim_of(client, task)
    headers = {**holder(claim), "HTTP_IDEMPOTENCY_KEY": "git-1"}
    first = client.post(attempt_url(claim, "git"), FACTS, format="json", **headers)
    again = client.post(attempt_url(claim, "git"), FACTS, format="json", **headers)
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"


def test_the_next_claim_inherits_released_work_and_its_context_says_where_it_is(client, other_client, task, agent):
    claim = claim_of(client, task, branch="feature/search-copy", base_commit=BASE)
    client.post(attempt_url(claim, "git"), FACTS, format="json", **holder(claim))
    assert client.post(attempt_url(claim, "release"), {}, format="json", **holder(claim)).status_code == 200

    rescue = claim_of(other_client, task)
    assert (rescue["attempt"]["branch"], rescue["attempt"]["base_commit"]) == ("feature/search-copy", BASE)
    assert rescue["context"]["predecessor_work"] == {
        "attempt": claim["attempt"]["id"],
        "status": "released",
        "agent": agent.handle,
        "branch": "feature/search-copy",
        "base_commit": BASE,
        "head_commit": HEAD,
        "commits_ahead": 2,
        "pushed": True,
        "dirty": False,
        "host": "box-a",
        "worktree_path": "/home/dev/web.worktrees/WEB-1",
    }
    read = other_client.get(f"/api/v1/tasks/{task.key}/context/").json()
    assert read["predecessor_work"] == rescue["context"]["predecessor_work"]
