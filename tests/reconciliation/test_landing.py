"""Reconciliation and the landing queue (SPEC §21.2) against real repositories.

A delivered task whose head reached the target outside Leasehold (a forge's merge, `land_method=none`,
or a merge by hand) is landed by reconciliation; a delivered task's worktree and branch wait for the
lander and are no orphans; a landed task's worktree and branch are merged: a clean one gives no
finding and `reconcile --prune-worktrees` removes it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import cast

import pytest
from django.core.management import call_command

from landing.services import (
    LandingProof,
    LandingSettings,
    TaskResult,
    landing_claim_next,
    landing_finish,
    project_set_landing,
)
from landing.services.reconciled import LANDED_BY_RECONCILIATION
from leases.services import attempt_finish, lease_claim
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, LandMethod, Project, Task, TaskStatus
from reconciliation.jobs import reconcile_job
from reconciliation.landed import TARGET_REFS_PREFIX
from reconciliation.models import Condition, Finding, FindingStatus, ReconciliationRun
from reconciliation.services import reconcile
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import IDENTITY, GitWorld, git
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db


def landing_project(world: GitWorld, *, remote: bool, method: str = LandMethod.NONE) -> Project:
    project = cast(Project, ProjectFactory(repository=str(world.clone), remote=world.url if remote else ""))
    project_set_landing(
        project=project, settings=LandingSettings(target_branch="main", land_method=method), actor=SYSTEM
    )
    project.refresh_from_db()
    return project


def delivered_worktree(world: GitWorld, project: Project, branch: str) -> tuple[Task, Path, str]:
    """A worktree with one commit, its attempt finished done: the task is delivered at that head."""
    path = world.add_worktree(branch)
    head = world.commit_file(branch.replace("/", "-") + ".txt", f"{branch}\n", f"work on {branch}", where=path)
    if project.remote:
        world.push(branch)
    task = cast(Task, TaskFactory(project=project))
    grant = lease_claim(task=task, agent=agent_in(project), branch=branch)
    attempt_finish(proof=proof_of(grant), outcome="done", git={"head_commit": head, "pushed": bool(project.remote)})
    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert task.delivered_commit == head
    return task, path, head


def merged_on_the_forge(world: GitWorld, branch: str) -> str:
    """Merge `branch` into the remote's main from another clone, as a forge's merge button does; the new tip."""
    forge = world.root / "forge"
    if not forge.exists():
        git("clone", "-q", str(world.remote), str(forge), cwd=world.root)
    git("fetch", "-q", "origin", cwd=forge)
    git("checkout", "-q", "-B", "main", "origin/main", cwd=forge)
    git(*IDENTITY, "merge", "-q", "--no-ff", "-m", f"Merge pull request {branch}", f"origin/{branch}", cwd=forge)
    git("push", "-q", "origin", "main", cwd=forge)
    return git("rev-parse", "HEAD", cwd=forge)


def run_reconcile(*args: str) -> ReconciliationRun:
    call_command("reconcile", *args, stdout=io.StringIO(), stderr=io.StringIO())
    return ReconciliationRun.objects.latest("id")


def unresolved(condition: str) -> list[Finding]:
    return list(Finding.objects.filter(condition=condition).exclude(status=FindingStatus.RESOLVED))


def landed_events(task: Task) -> list[Event]:
    return list(Event.objects.filter(task=task, type=EventType.TASK_LANDED))


# --- landed outside the queue ---------------------------------------------------------


def test_a_delivered_head_merged_by_hand_into_the_local_target_is_landed_by_reconciliation(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    task, path, head = delivered_worktree(world, project, "feature/by-hand")
    world.merge("feature/by-hand")
    tip = git("rev-parse", "main", cwd=world.clone)

    run = run_reconcile()

    task.refresh_from_db()
    assert task.status == TaskStatus.DONE
    assert (task.landed_commit, task.landed_by, task.landed_at) == (tip, LANDED_BY_RECONCILIATION, clock.now())
    [event] = landed_events(task)
    assert event.payload["head_commit"] == head
    assert event.payload["landed_by"] == LANDED_BY_RECONCILIATION
    # The same run already sees it landed: its clean worktree is no orphan.
    assert run.errors == []
    assert run.counts[Condition.ORPHAN_WORKTREE] == 0
    assert path.exists()

    run_reconcile()  # landing twice is not possible
    assert len(landed_events(task)) == 1


def test_a_delivered_head_merged_on_the_remote_lands_and_the_target_is_fetched_into_a_private_ref(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True)
    merged, merged_path, _ = delivered_worktree(world, project, "feature/forge-merged")
    waiting, waiting_path, _ = delivered_worktree(world, project, "feature/still-open")
    local_main = git("rev-parse", "refs/heads/main", cwd=world.clone)
    tip = merged_on_the_forge(world, "feature/forge-merged")

    result = reconcile_job()

    merged.refresh_from_db()
    waiting.refresh_from_db()
    assert (merged.status, merged.landed_commit, merged.landed_by) == (TaskStatus.DONE, tip, "reconciliation")
    assert result["landed"] == [merged.key]
    assert result["errors"] == 0
    assert waiting.status == TaskStatus.DELIVERED
    assert landed_events(waiting) == []
    # The clone's own branches are untouched: the target was fetched into a ref of Leasehold's own.
    assert git("rev-parse", "refs/heads/main", cwd=world.clone) == local_main
    assert git("rev-parse", f"{TARGET_REFS_PREFIX}main", cwd=world.clone) == tip
    # Neither worktree is an orphan: one landed (merged, though the local main never saw it), one waits.
    assert unresolved(Condition.ORPHAN_WORKTREE) == []
    assert unresolved(Condition.ORPHAN_BRANCH) == []
    assert merged_path.exists()
    assert waiting_path.exists()


def test_a_delivered_task_not_merged_stays_delivered_and_its_worktree_and_branch_are_no_orphans(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False, method=LandMethod.MERGE)
    task, path, _ = delivered_worktree(world, project, "feature/queued")
    world.commit_file("other.txt", "the target moved on\n", "unrelated work on main")

    run = run_reconcile()

    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    assert (task.landed_commit, task.landed_by) == ("", "")
    assert landed_events(task) == []
    assert run.errors == []
    assert run.counts[Condition.ORPHAN_WORKTREE] == 0
    assert run.counts[Condition.ORPHAN_BRANCH] == 0
    assert run_reconcile("--prune-worktrees").pruned == []
    assert path.exists()


def test_without_landing_on_a_merged_finished_worktree_is_still_a_removable_finding(tmp_path, clock):
    """A project without landing keeps part two's behaviour: `done` at finish, the merged worktree reported."""
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    path = world.add_worktree("feature/classic", commits=1)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/classic")
    attempt_finish(proof=proof_of(grant), outcome="done")
    world.merge("feature/classic")

    run_reconcile()

    [finding] = unresolved(Condition.ORPHAN_WORKTREE)
    assert finding.subject_key == str(path)
    assert finding.detail["disposition"] == "removable"
    assert "landed" not in finding.detail


def test_an_unreadable_target_is_an_error_of_the_run_and_lands_nothing(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    task, _, _ = delivered_worktree(world, project, "feature/lost-target")
    Project.objects.filter(pk=project.pk).update(target_branch="release")

    run = run_reconcile()

    task.refresh_from_db()
    assert task.status == TaskStatus.DELIVERED
    [error] = run.errors
    assert error["project"] == project.slug
    assert "landing target release" in error["message"]
    assert "not found" in error["message"]


# --- landed by the lander: worktrees and branches are merged ----------------------------


def land_all(world: GitWorld, project: Project) -> list[str]:
    """A lander's work, serial: merge each queued task onto the remote's main (never the clone's), finish landed."""
    lander = agent_in(project)
    landed: list[str] = []
    while (grant := landing_claim_next(project=project, agent=lander)) is not None:
        [entry] = grant.entries
        tip = merged_on_the_forge(world, entry.task.delivered_branch)
        proof = LandingProof(landing_id=grant.landing.pk, token=grant.token, epoch=grant.landing.epoch, agent=lander)
        finished = landing_finish(
            proof=proof, result="landed", tasks=[TaskResult(key=entry.task.key, outcome="landed")], landed_commit=tip
        )
        assert not isinstance(finished, Exception)
        landed.append(entry.task.key)
    return landed


def test_after_a_lander_lands_every_task_no_worktree_or_branch_is_an_orphan_and_prune_removes_them(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True, method=LandMethod.MERGE)
    delivered = [delivered_worktree(world, project, f"feature/fleet-{n}") for n in range(3)]
    # Before landing each worktree waits in the queue: no findings.
    assert reconcile().counts[Condition.ORPHAN_WORKTREE] == 0

    assert land_all(world, project) == [task.key for task, _, _ in delivered]

    run = reconcile()
    assert run.counts[Condition.ORPHAN_WORKTREE] == 0
    assert run.counts[Condition.ORPHAN_BRANCH] == 0
    assert run.counts[Condition.COMPLETED_BRANCH_MISSING] == 0
    assert Finding.objects.count() == 0

    pruned = run_reconcile("--prune-worktrees")
    assert sorted(pruned.pruned) == sorted(str(path) for _, path, _ in delivered)
    assert not any(path.exists() for _, path, _ in delivered)
    assert {f"feature/fleet-{n}" for n in range(3)} <= world.heads()  # branches are never deleted


def test_a_landed_worktree_with_uncommitted_changes_is_quarantined_not_silently_kept(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True, method=LandMethod.MERGE)
    _, path, _ = delivered_worktree(world, project, "feature/dirty-after")
    land_all(world, project)
    (path / "scratch.txt").write_text("written after the landing\n")

    run = run_reconcile("--prune-worktrees")

    [finding] = unresolved(Condition.ORPHAN_WORKTREE)
    assert finding.detail["disposition"] == "quarantined"
    assert finding.detail["reasons"] == ["untracked_files"]
    assert finding.detail["merged"] is True
    assert finding.detail["landed"] is True
    assert run.pruned == []
    assert path.exists()


def test_commits_made_after_the_landing_are_not_landed(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True, method=LandMethod.MERGE)
    _, path, _ = delivered_worktree(world, project, "feature/more-work")
    land_all(world, project)
    world.commit_file("late.txt", "late\n", "work after the landing", where=path)

    run_reconcile("--prune-worktrees")

    [finding] = unresolved(Condition.ORPHAN_WORKTREE)
    assert finding.detail["reasons"] == ["unmerged"]
    assert finding.detail["merged"] is False
    assert "landed" not in finding.detail
    assert path.exists()


def test_a_landed_task_whose_branch_the_forge_deleted_is_not_completed_work_without_a_branch(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True)
    task, path, _ = delivered_worktree(world, project, "feature/deleted-after-merge")
    merged_on_the_forge(world, "feature/deleted-after-merge")
    reconcile_job()
    task.refresh_from_db()
    assert task.status == TaskStatus.DONE
    world.remove_worktree(path)
    git("branch", "-D", "feature/deleted-after-merge", cwd=world.clone)
    git("push", "-q", "origin", "--delete", "feature/deleted-after-merge", cwd=world.clone)
    clock.advance(11 * 60)

    run = reconcile()

    assert run.counts[Condition.COMPLETED_BRANCH_MISSING] == 0
