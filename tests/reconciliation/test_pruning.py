"""`reconcile --prune-worktrees` removes clean worktrees whose work is safe, and nothing else."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from core.errors import ValidationFailed
from leases.services import attempt_finish, lease_claim
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from reconciliation.models import Condition, Finding, FindingStatus, ReconciliationRun
from reconciliation.pruning import PRUNED_NOTE
from reconciliation.services import attempt_discard, reconcile
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db

BRANCH = "feature/finished-work"


def worktree_of_an_ended_attempt(world: GitWorld, *, outcome: str = "done", commits: int = 1):
    path = world.add_worktree(BRANCH, commits=commits)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch=BRANCH)
    if outcome == "failed":
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    else:
        attempt_finish(proof=proof_of(grant), outcome=outcome)
    return path, grant.attempt


def worktree_finding() -> Finding:
    return Finding.objects.get(condition=Condition.ORPHAN_WORKTREE)


def prune() -> ReconciliationRun:
    call_command("reconcile", "--prune-worktrees", stdout=io.StringIO(), stderr=io.StringIO())
    return ReconciliationRun.objects.latest("id")


def test_a_clean_merged_worktree_is_removable_and_pruning_removes_it_but_keeps_the_branch(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, _ = worktree_of_an_ended_attempt(world)
    world.merge(BRANCH)

    run = prune()

    assert not path.exists()
    assert run.pruned == [str(path)]
    finding = worktree_finding()
    assert finding.detail["disposition"] == "removable"
    assert finding.status == FindingStatus.RESOLVED
    assert finding.resolution_note == PRUNED_NOTE
    assert BRANCH in world.heads()  # the ledger never deletes branches

    next_run = reconcile()
    assert next_run.counts[Condition.ORPHAN_WORKTREE] == 0


def test_without_the_flag_a_removable_worktree_is_only_reported(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, _ = worktree_of_an_ended_attempt(world)
    world.merge(BRANCH)

    run = reconcile()

    assert path.exists()
    assert run.pruned == []
    assert worktree_finding().detail["disposition"] == "removable"


@pytest.mark.parametrize(
    ("dirty", "reason"),
    [
        ("modified", "uncommitted_changes"),
        ("staged", "uncommitted_changes"),
        ("untracked", "untracked_files"),
        ("unmerged", "unmerged"),
    ],
)
def test_pruning_never_removes_a_worktree_holding_work(dirty, reason, tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, _ = worktree_of_an_ended_attempt(world)
    if dirty != "unmerged":
        world.merge(BRANCH)
    if dirty == "modified":
        (path / "README.md").write_text("changed but not committed\n")
    elif dirty == "staged":
        (path / "new.txt").write_text("staged\n")
        git("add", "new.txt", cwd=path)
    elif dirty == "untracked":
        (path / "notes.txt").write_text("never added\n")

    run = prune()

    assert path.exists()
    assert run.pruned == []
    finding = worktree_finding()
    assert finding.detail["disposition"] == "quarantined"
    assert reason in finding.detail["reasons"]
    assert finding.status == FindingStatus.OPEN


def test_an_ignored_file_does_not_hold_a_merged_worktree(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, _ = worktree_of_an_ended_attempt(world)
    world.merge(BRANCH)
    (world.clone / ".git" / "info").mkdir(exist_ok=True)
    (world.clone / ".git" / "info" / "exclude").write_text("*.log\n")
    (path / "build.log").write_text("ignored build output\n")

    assert prune().pruned == [str(path)]  # as `git worktree remove` itself judges it


def test_a_discarded_attempts_clean_worktree_is_removable_even_unmerged(tmp_path, clock, user_actor):
    world = GitWorld(tmp_path / "git")
    path, attempt = worktree_of_an_ended_attempt(world, outcome="failed")
    reconcile()
    assert worktree_finding().detail["disposition"] == "quarantined"

    attempt_discard(attempt=attempt, actor=user_actor, reason="superseded by another approach")
    run = prune()

    assert run.pruned == [str(path)]
    assert not path.exists()
    assert BRANCH in world.heads()


def test_a_worktree_claimed_again_is_not_pruned(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, attempt = worktree_of_an_ended_attempt(world)
    world.merge(BRANCH)
    lease_claim(task=TaskFactory(project=attempt.task.project), agent=agent_in(attempt.task.project), branch=BRANCH)

    run = prune()

    assert path.exists()
    assert run.pruned == []
    assert not Finding.objects.filter(condition=Condition.ORPHAN_WORKTREE).exists()


def test_a_locked_worktree_is_quarantined(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path, _ = worktree_of_an_ended_attempt(world)
    world.merge(BRANCH)
    git("worktree", "lock", str(path), cwd=world.clone)

    assert prune().pruned == []
    assert path.exists()
    assert worktree_finding().detail["reasons"] == ["locked"]


def test_discarding_needs_an_ended_attempt_and_a_reason(tmp_path, clock):
    project = ProjectFactory()
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project))
    with pytest.raises(ValidationFailed):
        attempt_discard(attempt=grant.attempt, actor=SYSTEM, reason="not yet")
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    with pytest.raises(ValidationFailed):
        attempt_discard(attempt=grant.attempt, actor=SYSTEM, reason="  ")
    first = attempt_discard(attempt=grant.attempt, actor=SYSTEM, reason="dead end")
    again = attempt_discard(attempt=grant.attempt, actor=SYSTEM, reason="dead end, really")
    assert again.pk == first.pk
    assert again.reason == "dead end"
    assert Event.objects.filter(type=EventType.ATTEMPT_DISCARDED, attempt_id=grant.attempt.pk).count() == 1
