"""One scenario per condition: builds exactly that mismatch, and knows the repair that ends it.

Each builder takes the git world's root and the frozen clock and returns the
condition it should produce, the subjects it should name, and `repair`.
Projects without a repository are used wherever git is not the point, so
the git conditions cannot chime in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

from environments.services import environment_create
from leases.models import Allocation
from leases.services import (
    allocation_release,
    attempt_finish,
    attempt_release,
    attempt_renew,
    lease_claim,
    note_add,
    sweep_expired,
)
from ledger.actors import SYSTEM
from ledger.models import Agent, Isolation, Project
from ledger.services import agent_heartbeat
from reconciliation.models import Condition
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git


@dataclass(frozen=True)
class Scenario:
    condition: str
    subjects: frozenset[str]
    repair: Callable[[], None]


def agent_in(project: Project) -> Agent:
    agent = cast(Agent, AgentFactory(projects=[project]))
    agent_heartbeat(agent=agent)
    return agent


def live_lease_dead_agent(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    agent = agent_in(project)  # last seen at the start
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    clock.advance(700)  # beyond the 600 s silence window
    attempt_renew(proof=proof_of(grant))  # the lease keeper still renews
    return Scenario(
        Condition.LIVE_LEASE_DEAD_AGENT, frozenset({str(grant.attempt.pk)}), lambda: agent_heartbeat(agent=agent)
    )


def expired_lease_still_active(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), lease_seconds=60)
    clock.advance(61)
    return Scenario(Condition.EXPIRED_LEASE_STILL_ACTIVE, frozenset({str(grant.attempt.pk)}), lambda: sweep_expired())


def branch_missing(root: Path, clock: ModuleType) -> Scenario:
    world = GitWorld(root)
    project = ProjectFactory(repository=str(world.clone))
    agent = agent_in(project)
    grant = lease_claim(
        task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch="feature/never-pushed"
    )
    clock.advance(11 * 60)
    agent_heartbeat(agent=agent)
    return Scenario(
        Condition.BRANCH_MISSING, frozenset({str(grant.attempt.pk)}), lambda: world.branch("feature/never-pushed")
    )


def orphan_branch(root: Path, clock: ModuleType) -> Scenario:
    world = GitWorld(root)
    world.branch("feature/failed-work", commits=2)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/failed-work")
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
    return Scenario(
        Condition.ORPHAN_BRANCH, frozenset({"feature/failed-work"}), lambda: world.merge("feature/failed-work")
    )


def duplicate_branch_label(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    first = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/shared")
    second = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/shared")
    assert first.attempt.task_id != second.attempt.task_id
    return Scenario(
        Condition.DUPLICATE_BRANCH_LABEL, frozenset({"feature/shared"}), lambda: attempt_release(proof=proof_of(second))
    )


def leaked_environment(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    environment_create(project=project, name="preview-a", kind="database", actor=SYSTEM)
    grant = lease_claim(
        task=TaskFactory(project=project), agent=agent_in(project), environment="preview-a", lease_seconds=60
    )
    clock.advance(61)
    sweep_expired()  # the attempt expires; its allocation is kept aside as stale
    allocation = Allocation.objects.get(attempt=grant.attempt)

    def repair() -> None:
        allocation_release(allocation=allocation, actor=SYSTEM)

    return Scenario(Condition.LEAKED_ENVIRONMENT, frozenset({"preview-a"}), repair)


def environment_collision(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    for name in ("preview-a", "preview-b"):
        environment_create(project=project, name=name, kind="port", actor=SYSTEM, resources={"ports": [5433]})
    first = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), environment="preview-a")
    lease_claim(task=TaskFactory(project=project), agent=agent_in(project), environment="preview-b")
    return Scenario(
        Condition.ENVIRONMENT_COLLISION,
        frozenset({"preview-a", "preview-b"}),
        lambda: attempt_finish(proof=proof_of(first), outcome="done"),
    )


def insufficient_isolation(root: Path, clock: ModuleType) -> Scenario:
    project = cast(Project, ProjectFactory())
    environment_create(project=project, name="shared-db", kind="database", actor=SYSTEM, isolation=Isolation.NONE)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), environment="shared-db")
    # The requirement was raised after the claim (no service edits projects yet).
    Project.objects.filter(pk=project.pk).update(required_isolation=Isolation.CONTAINER)
    return Scenario(
        Condition.INSUFFICIENT_ISOLATION, frozenset({"shared-db"}), lambda: attempt_release(proof=proof_of(grant))
    )


def orphan_worktree(root: Path, clock: ModuleType) -> Scenario:
    world = GitWorld(root)
    path = world.add_worktree("feature/reviewed-work", commits=1)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/reviewed-work")
    # Completed, so the branch is no orphan; not merged, so the worktree is quarantined.
    attempt_finish(proof=proof_of(grant), outcome="review")
    return Scenario(Condition.ORPHAN_WORKTREE, frozenset({str(path)}), lambda: world.remove_worktree(path))


def completed_branch_missing(root: Path, clock: ModuleType) -> Scenario:
    world = GitWorld(root)
    world.branch("feature/shipped-work", commits=1)
    tip = git("rev-parse", "refs/heads/feature/shipped-work", cwd=world.clone)
    project = ProjectFactory(repository=str(world.clone))
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/shipped-work")
    attempt_finish(proof=proof_of(grant), outcome="review", git={"head_commit": tip, "commits_ahead": 1})
    git("branch", "-D", "feature/shipped-work", cwd=world.clone)  # deleted, never merged
    clock.advance(11 * 60)

    def repair() -> None:
        git("branch", "feature/shipped-work", tip, cwd=world.clone)  # pushed back from the agent's machine

    return Scenario(Condition.COMPLETED_BRANCH_MISSING, frozenset({str(grant.attempt.pk)}), repair)


def stalled_attempt(root: Path, clock: ModuleType) -> Scenario:
    project = ProjectFactory()
    agent = agent_in(project)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    note_add(proof=proof_of(grant), kind="progress", content="started")
    clock.advance(1801)  # beyond the 1800 s stall window
    agent_heartbeat(agent=agent)  # the agent's process is alive
    attempt_renew(proof=proof_of(grant))  # and its lease is renewed, but nothing else happens

    def repair() -> None:
        note_add(proof=proof_of(grant), kind="progress", content="back at it")

    return Scenario(Condition.STALLED_ATTEMPT, frozenset({str(grant.attempt.pk)}), repair)


def unreserved_change(root: Path, clock: ModuleType) -> Scenario:
    world = GitWorld(root)
    base = git("rev-parse", "main", cwd=world.clone)
    git("checkout", "-q", "-b", "feature/touches-reserved", cwd=world.clone)
    (world.clone / "lib").mkdir()
    world.commit_file("lib/core.py", "x\n", "change a reserved file")
    git("checkout", "-q", "main", cwd=world.clone)
    project = ProjectFactory(repository=str(world.clone))
    holder = lease_claim(task=TaskFactory(project=project, paths=["lib"]), agent=agent_in(project))
    grant = lease_claim(
        task=TaskFactory(project=project),
        agent=agent_in(project),
        branch="feature/touches-reserved",
        base_commit=base,
    )
    attempt_finish(proof=proof_of(grant), outcome="review")
    # The reservation ends with its holder's lease.
    return Scenario(
        Condition.UNRESERVED_CHANGE,
        frozenset({str(grant.attempt.pk)}),
        lambda: attempt_release(proof=proof_of(holder)),
    )


SCENARIOS: dict[str, Callable[[Path, ModuleType], Scenario]] = {
    Condition.LIVE_LEASE_DEAD_AGENT: live_lease_dead_agent,
    Condition.EXPIRED_LEASE_STILL_ACTIVE: expired_lease_still_active,
    Condition.BRANCH_MISSING: branch_missing,
    Condition.ORPHAN_BRANCH: orphan_branch,
    Condition.DUPLICATE_BRANCH_LABEL: duplicate_branch_label,
    Condition.LEAKED_ENVIRONMENT: leaked_environment,
    Condition.ENVIRONMENT_COLLISION: environment_collision,
    Condition.INSUFFICIENT_ISOLATION: insufficient_isolation,
    Condition.ORPHAN_WORKTREE: orphan_worktree,
    Condition.COMPLETED_BRANCH_MISSING: completed_branch_missing,
    Condition.STALLED_ATTEMPT: stalled_attempt,
    Condition.UNRESERVED_CHANGE: unreserved_change,
}
