"""The landed-outside check follows what changed (SPEC §21.2, §25), against real repositories.

A run with a project's `TargetCursor` reads only the tasks delivered since its last run, those
whose head is among the commits the target gained, and those it found in the target but that
stayed delivered. These tests deliver work long before the run (past `DELIVERY_SLACK`), so only
the path under test can find it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from landing.services import LandingProof, landing_claim_next, landing_release, tasks_landed_outside
from ledger.models import LandMethod, Project, Task, TaskStatus
from reconciliation.git import LocalRepository
from reconciliation.landed import (
    DELIVERY_SLACK,
    LandingProject,
    delivered_to_check,
    heads_in_target,
    landing_projects,
    target_tip,
)
from reconciliation.models import TargetCursor
from reconciliation.services import reconcile
from tests.reconciliation.gitworld import IDENTITY, GitWorld, git
from tests.reconciliation.scenarios import agent_in
from tests.reconciliation.test_landing import delivered_worktree, landing_project

pytestmark = pytest.mark.django_db

PAST_THE_SLACK = (DELIVERY_SLACK + timedelta(minutes=1)).total_seconds()


def run() -> None:
    reconcile(land_outside=lambda found: tasks_landed_outside(landed=found))


def settled(clock) -> None:
    """A run, then another past the slack: what was delivered before it is read as checked."""
    run()
    clock.advance(PAST_THE_SLACK)
    run()


def checked(project: Project) -> list[str]:
    """The keys the next run would read for this project."""
    [landing] = [each for each in landing_projects() if each.id == project.pk]
    tip, local = target_tip(landing)
    cursor = TargetCursor.objects.filter(project_id=project.pk).first()
    return [task.task_key for task in delivered_to_check(landing, cursor, tip, local)]


def status(task: Task) -> str:
    task.refresh_from_db()
    return task.status


def test_an_unchanged_target_reads_only_what_was_delivered_since_the_last_run(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    waiting = [delivered_worktree(world, project, f"feature/wait-{n}")[0] for n in range(3)]
    assert sorted(checked(project)) == sorted(task.key for task in waiting)  # no cursor: all of them

    run()
    cursor = TargetCursor.objects.get(project_id=project.pk)
    assert (cursor.target_branch, cursor.tip, cursor.pending) == ("main", git("rev-parse", "main", cwd=world.clone), [])
    assert sorted(checked(project)) == sorted(task.key for task in waiting)  # still within the slack

    clock.advance(PAST_THE_SLACK)
    run()
    assert checked(project) == []
    late, _, _ = delivered_worktree(world, project, "feature/late")
    assert checked(project) == [late.key]
    assert all(status(task) == TaskStatus.DELIVERED for task in [*waiting, late])


def test_a_head_merged_long_after_its_delivery_is_found_among_the_commits_the_target_gained(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    old, _, _ = delivered_worktree(world, project, "feature/old")
    other, _, _ = delivered_worktree(world, project, "feature/other")
    settled(clock)
    world.merge("feature/old")

    assert checked(project) == [old.key]  # the other task is neither new nor among the gained commits
    run()
    assert (status(old), status(other)) == (TaskStatus.DONE, TaskStatus.DELIVERED)


def test_a_rewritten_target_reads_every_delivered_task_again(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    old, _, head = delivered_worktree(world, project, "feature/rewritten-in")
    other, _, _ = delivered_worktree(world, project, "feature/not-in")
    world.commit_file("on-main.txt", "x\n", "a commit the rewrite drops")
    settled(clock)
    # main is reset onto the delivered head: not a fast-forward of the tip the last run read.
    git("reset", "-q", "--hard", head, cwd=world.clone)
    git(*IDENTITY, "commit", "-q", "--allow-empty", "-m", "after the rewrite", cwd=world.clone)

    assert sorted(checked(project)) == sorted([old.key, other.key])
    run()
    assert (status(old), status(other)) == (TaskStatus.DONE, TaskStatus.DELIVERED)


def test_more_new_commits_than_the_bound_read_every_delivered_task(tmp_path, clock, monkeypatch):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    old, _, _ = delivered_worktree(world, project, "feature/many")
    settled(clock)
    monkeypatch.setattr("reconciliation.landed.NEW_COMMITS_MAX", 2)
    for number in range(3):
        world.commit_file(f"n{number}.txt", "x\n", f"unrelated {number}")
    assert checked(project) == [old.key]


def test_a_task_found_in_the_target_while_a_landing_held_it_is_landed_once_the_landing_is_given_back(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False, method=LandMethod.MERGE)
    task, _, _ = delivered_worktree(world, project, "feature/held")
    lander = agent_in(project)
    grant = landing_claim_next(project=project, agent=lander, lease_seconds=3600)
    assert grant is not None
    world.merge("feature/held")  # merged by hand while the lander works

    run()
    assert status(task) == TaskStatus.DELIVERED  # the landing room leaves a task a live landing holds
    assert TargetCursor.objects.get(project_id=project.pk).pending == [task.pk]

    proof = LandingProof(landing_id=grant.landing.pk, token=grant.token, epoch=grant.landing.epoch, agent=lander)
    clock.advance(PAST_THE_SLACK)
    run()  # still held: still pending
    assert TargetCursor.objects.get(project_id=project.pk).pending == [task.pk]
    landing_release(proof=proof, reason="told to stop")
    assert checked(project) == [task.key]  # tip unchanged, delivered long ago: read because it is pending
    run()
    assert status(task) == TaskStatus.DONE
    assert TargetCursor.objects.get(project_id=project.pk).pending == []


def test_a_changed_target_branch_or_a_full_run_reads_every_delivered_task(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    task, _, head = delivered_worktree(world, project, "feature/elsewhere")
    settled(clock)
    git("branch", "release", head, cwd=world.clone)
    Project.objects.filter(pk=project.pk).update(target_branch="release")
    assert checked(project) == [task.key]

    Project.objects.filter(pk=project.pk).update(target_branch="main")
    world.merge("feature/elsewhere")
    TargetCursor.objects.filter(project_id=project.pk).update(tip=git("rev-parse", "main", cwd=world.clone))
    assert checked(project) == []  # the cursor says this tip was read: only `full` reads it again
    reconcile(land_outside=lambda found: tasks_landed_outside(landed=found), full=True)
    assert status(task) == TaskStatus.DONE


def test_without_a_local_repository_a_moved_tip_reads_the_task_delivered_at_it(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=True)
    task, _, head = delivered_worktree(world, project, "feature/fast-forward")
    other, _, _ = delivered_worktree(world, project, "feature/not-yet")
    Project.objects.filter(pk=project.pk).update(repository="")
    settled(clock)
    git("push", "-q", "origin", f"{head}:refs/heads/main", cwd=world.clone)  # a fast-forward to the head

    assert checked(project) == [task.key]
    run()
    assert (status(task), status(other)) == (TaskStatus.DONE, TaskStatus.DELIVERED)


def test_heads_the_repository_does_not_hold_are_set_aside_in_one_git_call(tmp_path, clock, monkeypatch):
    world = GitWorld(tmp_path / "git")
    project = landing_project(world, remote=False)
    real, _, _ = delivered_worktree(world, project, "feature/real")
    ghost, _, _ = delivered_worktree(world, project, "feature/ghost")
    Task.objects.filter(pk=ghost.pk).update(delivered_commit="e" * 40)  # a head this repository lacks
    asked: list[str] = []
    contains = LocalRepository.contains

    def counted(self: LocalRepository, commit: str, tip: str) -> bool:
        asked.append(commit)
        return contains(self, commit, tip)

    monkeypatch.setattr(LocalRepository, "contains", counted)
    landing = LandingProject(project.pk, project.slug, str(world.clone), "", "main")
    assert heads_in_target(landing)[1] == {}
    assert asked == [real.delivered_commit]
