"""Reconciliation's workspace evidence (SPEC §15.4) against real repositories.

`completed_branch_missing` and `stalled_attempt`; commits as signs of life
for `live_lease_dead_agent`; the commits it sees on ended attempts' branches
as evidence of work that a claim inherits; and a project's `remote`.
"""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.test import override_settings

from leases.models import Attempt
from leases.services import attempt_finish, attempt_release, attempt_renew, attempt_set_git, lease_claim, note_add
from ledger.models import Event, EventType, Project
from ledger.services import agent_heartbeat
from reconciliation.models import Condition, Finding, FindingStatus, RunStatus
from reconciliation.services import reconcile
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GIT_TEST_ENV, IDENTITY, GitWorld, git
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db

# Commits made by the world's helpers are dated before the frozen clock's start, as a real past would be.
BEFORE_START = "@1767000000 +0000"  # 2025-12-29


@pytest.fixture(autouse=True)
def _commits_in_the_past(monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_DATE", BEFORE_START)
    monkeypatch.setenv("GIT_COMMITTER_DATE", BEFORE_START)


def open_findings() -> dict[str, list[Finding]]:
    found: dict[str, list[Finding]] = {}
    for finding in Finding.objects.exclude(status=FindingStatus.RESOLVED).order_by("id"):
        found.setdefault(finding.condition, []).append(finding)
    return found


def commit_at(where: Path, name: str, when: datetime, *, message: str = "work") -> str:
    """A commit in `where` whose author and committer time is `when` (the test clock, not the wall clock)."""
    (where / name).write_text(name)
    stamp = f"@{int(when.timestamp())} +0000"
    env = {**os.environ, **GIT_TEST_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    for args in (["add", name], [*IDENTITY, "commit", "-q", "-m", message]):
        subprocess.run(["git", *args], cwd=where, env=env, check=True, capture_output=True, timeout=30)
    return git("rev-parse", "HEAD", cwd=where)


# --- completed_branch_missing -------------------------------------------------


def completed_then_deleted(world: GitWorld, clock, *, merge: str = "none"):
    """A completed attempt whose branch (one commit) is then deleted from the clone; merged first as `merge` says."""
    world.branch("feature/shipped", commits=1)
    tip = git("rev-parse", "refs/heads/feature/shipped", cwd=world.clone)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/shipped")
    attempt_finish(proof=proof_of(grant), outcome="done", git={"head_commit": tip})
    grant.attempt.head_commit = tip
    if merge == "merge":
        world.merge("feature/shipped")
    elif merge == "squash-with-trailer":
        git("merge", "-q", "--squash", "feature/shipped", cwd=world.clone)
        label = grant.attempt.label
        git(*IDENTITY, "commit", "-q", "-m", f"Ship it\n\nLeasehold-Label: {label}", cwd=world.clone)
    elif merge == "squash":
        git("merge", "-q", "--squash", "feature/shipped", cwd=world.clone)
        git(*IDENTITY, "commit", "-q", "-m", "Ship it", cwd=world.clone)
    git("branch", "-D", "feature/shipped", cwd=world.clone)
    clock.advance(11 * 60)
    return project, grant


@pytest.mark.parametrize(("merge", "reported"), [("none", True), ("squash", True), ("merge", False)])
def test_a_completed_branch_that_is_gone_is_reported_unless_its_head_was_merged(merge, reported, tmp_path, clock):
    _, grant = completed_then_deleted(GitWorld(tmp_path / "git"), clock, merge=merge)
    reconcile()
    found = open_findings().get(Condition.COMPLETED_BRANCH_MISSING, [])
    assert [finding.attempt_id for finding in found] == ([grant.attempt.pk] if reported else [])
    if reported:
        assert found[0].detail["branch"] == "feature/shipped"
        assert found[0].detail["head_commit"] == grant.attempt.head_commit


def test_a_squash_whose_commit_carries_the_label_trailer_counts_as_merged(tmp_path, clock):
    completed_then_deleted(GitWorld(tmp_path / "git"), clock, merge="squash-with-trailer")
    reconcile()
    assert open_findings() == {}


def test_work_merged_into_the_remote_tracking_default_branch_counts_as_merged(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    _, grant = completed_then_deleted(world, clock)
    # Someone merged it upstream; this clone fetched, but never pulled its own main.
    other = tmp_path / "git" / "other"
    git("clone", "-q", str(world.remote), str(other), cwd=tmp_path)
    git("fetch", "-q", str(world.clone), f"{grant.attempt.head_commit}", cwd=other)
    git(*IDENTITY, "merge", "-q", "--no-ff", "-m", "merge upstream", "FETCH_HEAD", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    git("fetch", "-q", "origin", cwd=world.clone)
    reconcile()
    assert open_findings() == {}


def test_a_completed_branch_gets_a_grace_period_and_one_on_the_remote_exists(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("feature/pushed-only", commits=1)
    world.push("feature/pushed-only")
    git("branch", "-D", "feature/pushed-only", cwd=world.clone)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/pushed-only")
    attempt_finish(proof=proof_of(grant), outcome="review")
    clock.advance(9 * 60)
    reconcile()
    assert open_findings() == {}  # within the grace period
    clock.advance(2 * 60)
    reconcile()
    assert list(open_findings()) == [Condition.COMPLETED_BRANCH_MISSING]

    Project.objects.filter(pk=project.pk).update(remote=world.url)
    run = reconcile()
    assert run.errors == []
    assert open_findings() == {}  # the project's remote has it


def test_a_repository_known_only_by_url_cannot_tell_and_does_not_judge(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=world.url)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/never-pushed")
    attempt_finish(proof=proof_of(grant), outcome="done")
    clock.advance(3600)
    assert reconcile().errors == []
    assert open_findings() == {}


def test_completed_attempts_older_than_the_lookback_are_history(tmp_path, clock):
    completed_then_deleted(GitWorld(tmp_path / "git"), clock)
    clock.advance(31 * 24 * 3600)
    reconcile()
    assert open_findings() == {}


# --- stalled_attempt ------------------------------------------------------------


def renewed_without_work(project, clock, *, seconds: int, branch: str | None = None):
    agent = agent_in(project)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=7200, branch=branch)
    clock.advance(seconds)
    agent_heartbeat(agent=agent)
    attempt_renew(proof=proof_of(grant))
    return grant


def test_a_lease_renewed_past_the_stall_window_without_work_is_stalled(clock):
    project = ProjectFactory()
    young = renewed_without_work(project, clock, seconds=1800)
    reconcile()
    assert open_findings() == {}  # exactly the window: not yet
    clock.advance(1)
    attempt_renew(proof=proof_of(young))
    reconcile()
    (finding,) = open_findings()[Condition.STALLED_ATTEMPT]
    assert finding.attempt_id == young.attempt.pk
    assert finding.detail["last_worked_at"] is None
    assert finding.detail["last_work_at"] == "2026-01-05T09:00:00Z"  # the claim


@pytest.mark.parametrize("work", ["note", "git", "task"])
def test_any_holder_work_resolves_a_stalled_attempt(work, clock):
    grant = renewed_without_work(ProjectFactory(), clock, seconds=2000)
    reconcile()
    assert list(open_findings()) == [Condition.STALLED_ATTEMPT]
    proof = proof_of(grant)
    if work == "note":
        note_add(proof=proof, kind="progress", content="tests pass")
    elif work == "git":
        attempt_set_git(proof=proof, commits_ahead=1)
    else:
        from leases.services import task_update
        from ledger.actors import Actor

        task_update(task=grant.task, actor=Actor(agent=grant.attempt.agent), changes={"priority": 2}, proof=proof)
    reconcile()
    assert open_findings() == {}


def test_a_long_lease_nobody_renews_is_not_stalled(clock):
    project = ProjectFactory()
    agent = agent_in(project)
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=7200)
    clock.advance(3600)
    agent_heartbeat(agent=agent)
    reconcile()
    assert open_findings() == {}


def test_the_stall_window_follows_the_setting(clock):
    renewed_without_work(ProjectFactory(), clock, seconds=120)
    with override_settings(LEASEHOLD_STALL_SECONDS=60):
        reconcile()
    assert list(open_findings()) == [Condition.STALLED_ATTEMPT]


def test_commits_on_the_branch_are_work(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path = world.add_worktree("feature/quiet-but-busy")
    project = ProjectFactory(repository=str(world.clone))
    grant = renewed_without_work(project, clock, seconds=2000, branch="feature/quiet-but-busy")
    reconcile()
    assert list(open_findings()) == [Condition.STALLED_ATTEMPT]
    commit_at(path, "progress.txt", clock.now() - timedelta(seconds=60))
    reconcile()
    assert open_findings() == {}
    assert Attempt.objects.get(pk=grant.attempt.pk).last_worked_at is None  # evidence, not a holder write


# --- commits as signs of life ---------------------------------------------------


def silent_holder(tmp_path, clock, *, branch: str):
    world = GitWorld(tmp_path / "git")
    path = world.add_worktree(branch)
    project = ProjectFactory(repository=str(world.clone))
    agent = agent_in(project)  # last seen now
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch=branch)
    note_add(proof=proof_of(grant), kind="progress", content="on it")
    return world, path, grant


def test_a_commit_newer_than_the_heartbeat_is_a_sign_of_life(tmp_path, clock):
    _, path, grant = silent_holder(tmp_path, clock, branch="feature/committing")
    clock.advance(700)
    attempt_renew(proof=proof_of(grant))
    reconcile()
    assert list(open_findings()) == [Condition.LIVE_LEASE_DEAD_AGENT]

    commit_at(path, "a.txt", clock.now() - timedelta(seconds=30))
    reconcile()
    assert open_findings() == {}
    clock.advance(700)  # and it ages like a heartbeat
    attempt_renew(proof=proof_of(grant))
    reconcile()
    (finding,) = open_findings()[Condition.LIVE_LEASE_DEAD_AGENT]
    assert finding.detail["branch_committed_at"] == "2026-01-05T09:11:10Z"


def test_a_commit_from_before_the_claim_is_no_sign_of_this_holders_life(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    path = world.add_worktree("feature/inherited")
    commit_at(path, "old.txt", clock.now() - timedelta(seconds=5))  # the predecessor's tip
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(
        task=TaskFactory(project=project), agent=agent_in(project), lease_seconds=3600, branch="feature/inherited"
    )
    note_add(proof=proof_of(grant), kind="progress", content="continuing")
    clock.advance(700)
    attempt_renew(proof=proof_of(grant))
    reconcile()
    assert list(open_findings()) == [Condition.LIVE_LEASE_DEAD_AGENT]


def test_a_commit_dated_in_the_future_is_not_believed(tmp_path, clock):
    _, path, grant = silent_holder(tmp_path, clock, branch="feature/skewed-clock")
    clock.advance(700)
    attempt_renew(proof=proof_of(grant))
    commit_at(path, "a.txt", clock.now() + timedelta(hours=1))
    reconcile()
    assert list(open_findings()) == [Condition.LIVE_LEASE_DEAD_AGENT]


def test_an_unreadable_repository_leaves_the_git_informed_findings_as_they_were(tmp_path, clock):
    _, _, grant = silent_holder(tmp_path, clock, branch="feature/somewhere")
    clock.advance(700)
    attempt_renew(proof=proof_of(grant))
    reconcile()
    (finding,) = open_findings()[Condition.LIVE_LEASE_DEAD_AGENT]
    Project.objects.filter(pk=finding.project_id).update(repository=str(tmp_path / "gone"))
    agent_heartbeat(agent=grant.attempt.agent)  # alive again, but the run cannot see the branch
    run = reconcile()
    assert run.status == RunStatus.PARTIAL
    finding.refresh_from_db()
    assert finding.status == FindingStatus.OPEN


# --- commits seen on ended attempts' branches -----------------------------------


def ended_without_facts(world: GitWorld, *, how: str, commits: int):
    base = git("rev-parse", "refs/heads/main", cwd=world.clone)
    project = ProjectFactory(repository=str(world.clone))
    task = TaskFactory(project=project, title="Fix login")
    grant = lease_claim(task=task, agent=agent_in(project), branch="feature/left-behind", base_commit=base)
    world.branch("feature/left-behind", commits=commits)
    if how == "released":
        attempt_release(proof=proof_of(grant))
    else:
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="environment_error")
    return task, grant, base


@pytest.mark.parametrize("how", ["released", "failed"])
def test_commits_reconciliation_saw_make_an_ended_attempts_branch_inherited(how, tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    task, grant, base = ended_without_facts(world, how=how, commits=2)
    reconcile()
    assert Attempt.objects.get(pk=grant.attempt.pk).seen_commits_ahead == 2
    (event,) = Event.objects.filter(type=EventType.ATTEMPT_UPDATED, attempt_id=grant.attempt.pk)
    assert (event.payload, event.actor_agent) == ({"seen_commits_ahead": 2}, None)
    reconcile()
    assert Event.objects.filter(type=EventType.ATTEMPT_UPDATED, attempt_id=grant.attempt.pk).count() == 1

    again = lease_claim(task=task, agent=agent_in(task.project))
    assert (again.attempt.branch, again.attempt.base_commit) == ("feature/left-behind", base)


def test_a_branch_without_commits_beyond_its_base_is_not_inherited(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    task, grant, _ = ended_without_facts(world, how="released", commits=0)
    reconcile()
    assert Attempt.objects.get(pk=grant.attempt.pk).seen_commits_ahead == 0
    assert lease_claim(task=task, agent=agent_in(task.project)).attempt.branch != "feature/left-behind"


def test_a_base_the_repository_lacks_is_counted_from_the_default_branch(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    _, grant, _ = ended_without_facts(world, how="failed", commits=3)
    Attempt.objects.filter(pk=grant.attempt.pk).update(base_commit="f" * 40)
    reconcile()
    assert Attempt.objects.get(pk=grant.attempt.pk).seen_commits_ahead == 3


def test_the_branches_of_finished_tasks_are_not_counted(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    task, grant, _ = ended_without_facts(world, how="failed", commits=1)
    from leases.services import task_update
    from ledger.actors import SYSTEM

    task_update(task=task, actor=SYSTEM, changes={"status": "cancelled"}, expected_version=task.version)
    reconcile()
    assert Attempt.objects.get(pk=grant.attempt.pk).seen_commits_ahead is None


# --- the project's remote -------------------------------------------------------


def test_a_live_branch_on_the_remote_only_is_not_missing_and_orphans_say_if_pushed(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone), remote=world.url)
    agent = agent_in(project)
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch="feature/pushed-elsewhere")
    other = tmp_path / "git" / "agent-machine"
    git("clone", "-q", str(world.remote), str(other), cwd=tmp_path)
    git("checkout", "-q", "-b", "feature/pushed-elsewhere", cwd=other)
    git("push", "-q", "origin", "feature/pushed-elsewhere", cwd=other)
    world.branch("fix/abandoned", commits=1)
    failed = lease_claim(task=TaskFactory(project=project), agent=agent, branch="fix/abandoned")
    attempt_finish(proof=proof_of(failed), outcome="failed", failure_reason_code="other")
    clock.advance(11 * 60)
    agent_heartbeat(agent=agent)
    reconcile()
    found = open_findings()
    assert list(found) == [Condition.ORPHAN_BRANCH]
    assert found[Condition.ORPHAN_BRANCH][0].detail["pushed"] is False
    world.push("fix/abandoned")
    reconcile()
    assert open_findings()[Condition.ORPHAN_BRANCH][0].detail["pushed"] is True


def test_an_unreachable_remote_is_a_run_error_and_proves_nothing(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("fix/abandoned", commits=1)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="fix/abandoned")
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    reconcile()
    (finding,) = open_findings()[Condition.ORPHAN_BRANCH]
    world.merge("fix/abandoned")
    Project.objects.filter(pk=project.pk).update(remote=(tmp_path / "nowhere.git").as_uri())
    run = reconcile()
    assert [error["project"] for error in run.errors] == [project.slug]
    finding.refresh_from_db()
    assert finding.status == FindingStatus.OPEN


def test_a_project_with_only_a_remote_reads_it_as_its_repository(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(remote=world.url)
    agent = agent_in(project)
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch="feature/not-pushed")
    clock.advance(11 * 60)
    agent_heartbeat(agent=agent)
    assert reconcile().errors == []
    assert list(open_findings()) == [Condition.BRANCH_MISSING]
