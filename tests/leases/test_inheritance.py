"""Inheritance (SPEC §15.4): a new attempt continues the branch and base commit of the latest ended attempt
that left work on its branch, whatever way it ended, unless the claim names another branch."""

from __future__ import annotations

import itertools

import pytest

from leases.context import work_context
from leases.models import Attempt, AttemptStatus
from leases.selectors import INHERITING_STATUSES, left_work, left_work_on_branch, predecessor_with_work
from leases.services import (
    attempt_finish,
    attempt_release,
    attempt_set_git,
    lease_claim,
    sweep_expired,
    task_force_release,
)
from tests.factories import AgentFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

BASE = "b" * 40
HEAD = "c" * 40
BRANCH = "feature/login-fix"
WORK = {"commits_ahead": 2, "head_commit": HEAD, "pushed": True, "host": "box-a", "worktree_path": "/w/WEB-1"}


@pytest.fixture
def other(project):
    return AgentFactory(handle="agent-08", kind="codex", projects=[project])


@pytest.fixture
def task(project):
    return TaskFactory(project=project, title="Fix login")


def end(grant, how: str, clock) -> None:
    proof = proof_of(grant)
    if how == "expired":
        clock.advance(grant.attempt.lease_seconds + 1)
        sweep_expired()
    elif how == "lapsed":  # still active when the next claim comes: the claim expires it
        clock.advance(grant.attempt.lease_seconds + 1)
    elif how == "released":
        attempt_release(proof=proof)
    elif how == "failed":
        attempt_finish(proof=proof, outcome="failed", failure_reason_code="tests_failed")
    elif how == "interrupted":
        attempt_finish(proof=proof, outcome="handoff", interruption_reason_code="context_limit")
    else:
        raise AssertionError(how)


def worked(task, agent, **facts):
    grant = lease_claim(task=task, agent=agent, branch=BRANCH, base_commit=BASE, lease_seconds=60)
    if facts:
        attempt_set_git(proof=proof_of(grant), **facts)
    return grant


@pytest.mark.parametrize("how", ["expired", "lapsed", "released", "failed", "interrupted"])
def test_the_branch_and_base_are_inherited_after_work_however_the_attempt_ended(how, clock, task, agent, other):
    first = worked(task, agent, **WORK)
    end(first, how, clock)
    second = lease_claim(task=task, agent=other)
    assert (second.attempt.branch, second.attempt.base_commit) == (BRANCH, BASE)
    assert second.attempt.label == f"owner=agent-08;branch={BRANCH};env=-;task=WEB-1;epoch=2"
    assert second.predecessor_id == first.attempt.pk


@pytest.mark.parametrize("how", ["released", "failed"])
def test_reconciliations_count_is_evidence_of_work_too(how, clock, task, agent, other):
    first = worked(task, agent)
    end(first, how, clock)
    Attempt.objects.filter(pk=first.attempt.pk).update(seen_commits_ahead=4)
    assert lease_claim(task=task, agent=other).attempt.branch == BRANCH


@pytest.mark.parametrize("how", ["expired", "lapsed", "released", "failed", "interrupted"])
def test_an_attempt_that_reported_no_commits_passes_nothing_on(how, clock, task, agent, other):
    first = worked(task, agent, commits_ahead=0)
    end(first, how, clock)
    second = lease_claim(task=task, agent=other)
    assert second.attempt.branch == "codex/web-1-fix-login"
    assert second.attempt.base_commit == ""
    assert second.predecessor_id is None


@pytest.mark.parametrize("how", ["released", "failed"])
def test_a_release_or_failure_without_any_count_passes_nothing_on(how, clock, task, agent, other):
    end(worked(task, agent), how, clock)
    assert lease_claim(task=task, agent=other).attempt.branch == "codex/web-1-fix-login"


@pytest.mark.parametrize("how", ["expired", "lapsed", "interrupted"])
def test_a_crash_or_handoff_without_any_count_is_presumed_to_have_left_work(how, clock, task, agent, other):
    end(worked(task, agent), how, clock)
    second = lease_claim(task=task, agent=other)
    assert (second.attempt.branch, second.attempt.base_commit) == (BRANCH, BASE)


def test_a_claim_naming_another_branch_inherits_neither_branch_nor_base(clock, task, agent, other):
    end(worked(task, agent, **WORK), "failed", clock)
    second = lease_claim(task=task, agent=other, branch="feature/fresh-start")
    assert (second.attempt.branch, second.attempt.base_commit) == ("feature/fresh-start", "")
    assert second.predecessor_id is None


def test_a_claim_naming_the_same_branch_still_inherits_the_base(clock, task, agent, other):
    end(worked(task, agent, **WORK), "released", clock)
    second = lease_claim(task=task, agent=other, branch=BRANCH)
    assert second.attempt.base_commit == BASE


def test_a_claims_own_base_commit_wins_over_the_inherited_one(clock, task, agent, other):
    end(worked(task, agent, **WORK), "released", clock)
    second = lease_claim(task=task, agent=other, base_commit="d" * 40)
    assert (second.attempt.branch, second.attempt.base_commit) == (BRANCH, "d" * 40)


def test_an_attempt_without_work_in_between_is_passed_over(clock, task, agent, other):
    first = worked(task, agent, **WORK)
    end(first, "failed", clock)
    second = lease_claim(task=task, agent=other, branch="feature/try-again")
    attempt_set_git(proof=proof_of(second), commits_ahead=0)
    end(second, "released", clock)
    third = lease_claim(task=task, agent=agent)
    assert (third.attempt.branch, third.attempt.base_commit, third.predecessor_id) == (BRANCH, BASE, first.attempt.pk)


def test_completed_and_revoked_attempts_are_not_inherited(clock, task, agent, other, user_actor):
    worked(task, agent, **WORK)
    task_force_release(task=task, actor=user_actor, reason="stop")
    assert lease_claim(task=task, agent=other).attempt.branch == "codex/web-1-fix-login"
    reviewed = TaskFactory(project=task.project, title="Done once")
    done = lease_claim(task=reviewed, agent=agent, branch="feature/done-once", lease_seconds=60)
    attempt_finish(proof=proof_of(done), outcome="review", git={"commits_ahead": 5})
    assert predecessor_with_work(reviewed) is None


def test_the_rule_as_a_filter_and_as_a_function_agree(task, agent):
    grant = lease_claim(task=task, agent=agent)
    statuses = [*INHERITING_STATUSES, AttemptStatus.COMPLETED, AttemptStatus.REVOKED, AttemptStatus.ACTIVE]
    counts = [None, 0, 3]
    cases = list(itertools.product(statuses, ["", BRANCH], counts, counts))
    for status, branch, ahead, seen in cases:
        Attempt.objects.filter(pk=grant.attempt.pk).update(
            status=status,
            branch=branch,
            commits_ahead=ahead,
            seen_commits_ahead=seen,
            finished_at=None if status == AttemptStatus.ACTIVE else grant.attempt.claimed_at,
            failure_reason_code="other" if status == AttemptStatus.FAILED else "",
            interruption_reason_code="other" if status == AttemptStatus.INTERRUPTED else "",
            revoked_by="x" if status == AttemptStatus.REVOKED else "",
            revoke_reason="x" if status == AttemptStatus.REVOKED else "",
        )
        in_filter = Attempt.objects.filter(left_work(), pk=grant.attempt.pk).exists()
        by_function = left_work_on_branch(status=status, branch=branch, commits_ahead=ahead, seen_commits_ahead=seen)
        assert in_filter == by_function, (status, branch, ahead, seen)


def test_the_claims_context_says_where_the_inherited_work_is(clock, task, agent, other):
    first = worked(task, agent, **WORK, dirty=True)
    end(first, "failed", clock)
    second = lease_claim(task=task, agent=other)
    context = work_context(
        task=task, now=clock.now(), attempt=second.attempt, just_claimed=True, predecessor_id=second.predecessor_id
    )
    assert context["predecessor_work"] == {
        "attempt": first.attempt.pk,
        "status": "failed",
        "agent": "agent-07",
        "branch": BRANCH,
        "base_commit": BASE,
        "head_commit": HEAD,
        "commits_ahead": 2,
        "pushed": True,
        "dirty": True,
        "host": "box-a",
        "worktree_path": "/w/WEB-1",
    }
    assert context["git"]["branch"] == BRANCH
    assert context["git"]["base_commit"] == BASE
    assert context["git"]["head_commit"] is None
    # Read later, by the holder or anyone: the same answer.
    assert work_context(task=task, now=clock.now())["predecessor_work"] == context["predecessor_work"]
    assert work_context(task=task, now=clock.now(), attempt=second.attempt)["predecessor_work"]["attempt"] == (
        first.attempt.pk
    )


def test_the_context_has_no_predecessor_work_when_the_claim_went_elsewhere(clock, task, agent, other):
    end(worked(task, agent, **WORK), "failed", clock)
    second = lease_claim(task=task, agent=other, branch="feature/fresh-start")
    claimed = work_context(
        task=task, now=clock.now(), attempt=second.attempt, just_claimed=True, predecessor_id=second.predecessor_id
    )
    assert claimed["predecessor_work"] is None
    assert work_context(task=task, now=clock.now())["predecessor_work"] is None


def test_before_any_claim_the_context_shows_what_a_claim_would_inherit(clock, task, agent):
    first = worked(task, agent, **WORK)
    end(first, "released", clock)
    assert work_context(task=task, now=clock.now())["predecessor_work"]["attempt"] == first.attempt.pk
    assert work_context(task=task, now=clock.now())["git"] is None


def test_work_older_than_the_recent_attempts_is_still_found(clock, task, agent, other):
    first = worked(task, agent, **WORK)
    end(first, "failed", clock)
    for _ in range(3):  # each continues the branch, reports nothing, and gives the task back
        again = lease_claim(task=task, agent=other)
        assert again.predecessor_id == first.attempt.pk
        end(again, "released", clock)
    assert work_context(task=task, now=clock.now())["predecessor_work"]["attempt"] == first.attempt.pk
    assert lease_claim(task=task, agent=agent).predecessor_id == first.attempt.pk


def test_reading_the_context_finds_recent_work_without_another_query(clock, task, agent, django_assert_num_queries):
    end(worked(task, agent, **WORK), "released", clock)
    work_context(task=task, now=clock.now())  # warm up
    # live attempt, blockers, checkpoint, recent attempts: the predecessor is one of them;
    # and SPEC §16's review findings, decisions, comments; SPEC §22's checks at the head it reported
    with django_assert_num_queries(8):
        assert work_context(task=task, now=clock.now())["predecessor_work"] is not None
