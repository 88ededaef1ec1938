"""Each reconciliation condition of SPEC §7 as a plain function: what was read in, observations out.

The ledger conditions look only at the snapshot; the git conditions also at
one project's repository, read through `RepositoryView`. None of them writes:
`leases.reconciliation.services` turns observations into findings.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from leases.models import AttemptStatus
from leases.reconciliation.git import GitError, LocalRepository, Worktree, is_url, remote_heads, worktree_cleanliness
from leases.reconciliation.models import Condition, SubjectType
from leases.reconciliation.snapshot import ActiveAttempt, BranchHistory, HeldAllocation, ProjectRow
from ledger import clock
from ledger.models import Isolation

# SPEC §7: a young attempt may not have pushed or created its branch yet.
BRANCH_MISSING_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class Observation:
    """One condition holding for one subject at this run."""

    condition: str
    project_id: int
    subject_type: str
    subject_key: str
    detail: dict[str, Any] = field(default_factory=dict)
    task_id: int | None = None
    attempt_id: int | None = None
    environment_id: int | None = None

    @property
    def key(self) -> tuple[int, str, str, str]:
        return (self.project_id, self.condition, self.subject_type, self.subject_key)


def _attempt_observation(condition: str, attempt: ActiveAttempt, detail: dict[str, Any]) -> Observation:
    return Observation(
        condition=condition,
        project_id=attempt.project_id,
        subject_type=SubjectType.ATTEMPT,
        subject_key=str(attempt.id),
        detail={"task": attempt.task_key, "agent": attempt.agent_handle, **detail},
        task_id=attempt.task_id,
        attempt_id=attempt.id,
    )


# --- ledger conditions ----------------------------------------------------------


def live_lease_dead_agent(
    attempts: Iterable[ActiveAttempt], *, now: datetime, silence: timedelta
) -> Iterator[Observation]:
    """A live lease renewed within its own length, held by an agent whose run heartbeat fell silent.

    A lease keeper may outlive the agent it renews for; this is how that
    shows. An agent that never sent a heartbeat counts as silent only once
    the attempt itself is older than the silence window.
    """
    for attempt in attempts:
        if not attempt.is_live(now):
            continue
        last_activity = max(attempt.claimed_at, attempt.last_renewed_at or attempt.claimed_at)
        if last_activity < now - timedelta(seconds=attempt.lease_seconds):
            continue
        seen = attempt.agent_last_seen_at
        silent = attempt.claimed_at < now - silence if seen is None else seen < now - silence
        if silent:
            yield _attempt_observation(
                Condition.LIVE_LEASE_DEAD_AGENT,
                attempt,
                {
                    "agent_last_seen_at": clock.iso(seen),
                    "last_renewed_at": clock.iso(attempt.last_renewed_at),
                    "lease_expires_at": clock.iso(attempt.lease_expires_at),
                },
            )


def expired_lease_still_active(attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """Still `active` past its lease: the sweep has not run since. The sweep is the remedy."""
    for attempt in attempts:
        if not attempt.is_live(now):
            yield _attempt_observation(
                Condition.EXPIRED_LEASE_STILL_ACTIVE,
                attempt,
                {
                    "lease_expires_at": clock.iso(attempt.lease_expires_at),
                    "overdue_seconds": int((now - attempt.lease_expires_at).total_seconds()),
                },
            )


def duplicate_branch_label(attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """One branch named by two live attempts of a project (necessarily of two different tasks)."""
    by_branch: dict[tuple[int, str], list[ActiveAttempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.is_live(now) and attempt.branch:
            by_branch[(attempt.project_id, attempt.branch)].append(attempt)
    for (project_id, branch), holders in sorted(by_branch.items()):
        if len(holders) > 1:
            yield Observation(
                condition=Condition.DUPLICATE_BRANCH_LABEL,
                project_id=project_id,
                subject_type=SubjectType.BRANCH,
                subject_key=branch,
                detail={
                    "attempts": [
                        {"attempt": a.id, "task": a.task_key, "agent": a.agent_handle}
                        for a in sorted(holders, key=lambda a: a.id)
                    ]
                },
            )


def _environment_observation(condition: str, allocation: HeldAllocation, detail: dict[str, Any]) -> Observation:
    return Observation(
        condition=condition,
        project_id=allocation.project_id,
        subject_type=SubjectType.ENVIRONMENT,
        subject_key=allocation.environment_name,
        detail={
            "allocation": allocation.id,
            "allocation_status": allocation.status,
            "attempt": allocation.attempt_id,
            "task": allocation.task_key,
            **detail,
        },
        task_id=allocation.task_id,
        attempt_id=allocation.attempt_id,
        environment_id=allocation.environment_id,
    )


def leaked_environment(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """An allocation still active or stale whose attempt has ended; an admin must release or quarantine it."""
    for allocation in allocations:
        if allocation.attempt_status != AttemptStatus.ACTIVE:
            yield _environment_observation(
                Condition.LEAKED_ENVIRONMENT, allocation, {"attempt_status": allocation.attempt_status}
            )


def insufficient_isolation(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """A held environment below its project's required isolation (the requirement was raised after the claim)."""
    for allocation in allocations:
        if Isolation.rank(allocation.isolation) < Isolation.rank(allocation.required_isolation):
            yield _environment_observation(
                Condition.INSUFFICIENT_ISOLATION,
                allocation,
                {"isolation": allocation.isolation, "required_isolation": allocation.required_isolation},
            )


def _normalized_database_url(url: str) -> str:
    """Two spellings of one database are one database: case of scheme and host, `postgresql`, trailing `/`."""
    parts = urlsplit(url.strip())
    scheme = {"postgresql": "postgres"}.get(parts.scheme.lower(), parts.scheme.lower())
    try:
        port = str(parts.port or "")
    except ValueError:
        port = ""
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


def declared_resources(resources: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (kind, value) pairs two environments must not share: database, ports, container, host path."""
    declared: list[tuple[str, Any]] = []
    if isinstance(resources.get("database_url"), str) and resources["database_url"].strip():
        declared.append(("database_url", _normalized_database_url(resources["database_url"])))
    ports = resources.get("ports")
    if isinstance(ports, list):
        declared.extend(("port", port) for port in ports if isinstance(port, int))
    if isinstance(resources.get("container_name"), str) and resources["container_name"].strip():
        declared.append(("container_name", resources["container_name"].strip()))
    if isinstance(resources.get("host_path"), str) and resources["host_path"].strip():
        declared.append(("host_path", os.path.normpath(resources["host_path"].strip())))
    return declared


def environment_collision(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """Environments held at once that declare the same database, port, container or host path.

    Compared across projects (a port is a port); each environment involved
    gets its own finding naming the others, so each resolves on its own.
    """
    held = {allocation.environment_id: allocation for allocation in allocations}
    claimants: dict[tuple[str, Any], set[int]] = defaultdict(set)
    for allocation in held.values():
        for resource in declared_resources(allocation.resources):
            claimants[resource].add(allocation.environment_id)
    clashes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for (kind, value), environment_ids in sorted(claimants.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if len(environment_ids) < 2:
            continue
        for environment_id in sorted(environment_ids):
            others = [held[other] for other in sorted(environment_ids) if other != environment_id]
            clashes[environment_id].append(
                {
                    "resource": kind,
                    "value": value,
                    "with": [{"project": o.project_slug, "environment": o.environment_name} for o in others],
                }
            )
    for environment_id, collisions in sorted(clashes.items()):
        yield _environment_observation(
            Condition.ENVIRONMENT_COLLISION, held[environment_id], {"collisions": collisions}
        )


# --- git conditions -------------------------------------------------------------


class RepositoryView:
    """One project's repository as this run sees it; each git question is asked at most once.

    A URL is read with `ls-remote` only: its branches are known, whether one
    is merged is not (`merged` answers None), and it has no worktrees.
    """

    def __init__(self, project: ProjectRow) -> None:
        self.project = project
        self.local: LocalRepository | None = None
        if is_url(project.repository):
            self.heads = remote_heads(project.repository)
        else:
            self.local = LocalRepository(project.repository)
            self.heads = self.local.heads()
        if project.default_branch not in self.heads:
            raise GitError(f"default branch {project.default_branch!r} not found in {project.repository}")
        self._merged: dict[str, bool | None] = {}

    def merged(self, branch: str) -> bool | None:
        """Whether the branch is merged into the default branch; None when git cannot say (URL)."""
        if branch not in self._merged:
            if self.local is not None:
                self._merged[branch] = self.local.is_ancestor(branch, self.project.default_branch)
            else:
                same_tip = self.heads.get(branch) == self.heads[self.project.default_branch]
                self._merged[branch] = True if same_tip else None
        return self._merged[branch]

    def commits_ahead(self, branch: str) -> int | None:
        if self.local is None:
            return None
        return self.local.commits_ahead(branch, self.project.default_branch)

    def worktrees(self) -> list[Worktree]:
        return self.local.worktrees() if self.local is not None else []


def branch_missing(view: RepositoryView, attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """A live attempt, older than the grace period, whose branch the repository does not have."""
    for attempt in attempts:
        if (
            attempt.project_id == view.project.id
            and attempt.is_live(now)
            and attempt.branch
            and attempt.claimed_at < now - BRANCH_MISSING_GRACE
            and attempt.branch not in view.heads
        ):
            yield _attempt_observation(
                Condition.BRANCH_MISSING,
                attempt,
                {"branch": attempt.branch, "claimed_at": clock.iso(attempt.claimed_at)},
            )


def orphan_branch(view: RepositoryView, histories: dict[str, BranchHistory]) -> Iterator[Observation]:
    """A branch in the repository named by attempts that all ended without completing, and not merged.

    The work of a failed, expired, released or revoked attempt: nobody will
    finish it on its own. A branch no attempt ever named is not the ledger's
    business and is never reported.
    """
    for branch in sorted(view.heads):
        history = histories.get(branch)
        if branch == view.project.default_branch or history is None or not history.all_terminal_none_completed:
            continue
        merged = view.merged(branch)
        if merged:
            continue
        yield Observation(
            condition=Condition.ORPHAN_BRANCH,
            project_id=view.project.id,
            subject_type=SubjectType.BRANCH,
            subject_key=branch,
            detail={
                "tip": view.heads[branch],
                "merged": merged,
                "commits_ahead": view.commits_ahead(branch),
                "attempts": history.attempts,
                "latest_attempt": history.latest_attempt_id,
            },
            attempt_id=history.latest_attempt_id,
        )


REMOVABLE = "removable"
QUARANTINED = "quarantined"


def orphan_worktree(
    view: RepositoryView,
    worktrees: Iterable[Worktree],
    histories: dict[str, BranchHistory],
    *,
    live_branches: set[str],
) -> Iterator[Observation]:
    """A linked worktree on a branch some attempt named, with no live attempt on it now.

    `removable` only when the work is safe without it — its branch is merged
    into the default branch, or its latest attempt was discarded by an admin
    — and nothing in it would be lost: no uncommitted change, no untracked
    file, not locked. Anything else is `quarantined`: kept for a person to
    look at. The main worktree, bare entries, detached worktrees and
    worktrees whose directory is gone (git's own `prune` handles those) are
    not reported.
    """
    for worktree in worktrees:
        branch = worktree.branch
        if worktree.is_main or worktree.bare or worktree.prunable or branch is None:
            continue
        history = histories.get(branch)
        if history is None or branch in live_branches:
            continue
        merged = view.merged(branch) if branch in view.heads else False
        reasons: list[str] = []
        modified: int | None
        untracked: int | None
        try:
            cleanliness = worktree_cleanliness(worktree.path)
            modified, untracked = cleanliness.modified, cleanliness.untracked
        except GitError:
            modified = untracked = None
            reasons.append("status_unreadable")
        if not merged and not history.latest_attempt_discarded:
            reasons.append("unmerged")
        if modified:
            reasons.append("uncommitted_changes")
        if untracked:
            reasons.append("untracked_files")
        if worktree.locked:
            reasons.append("locked")
        yield Observation(
            condition=Condition.ORPHAN_WORKTREE,
            project_id=view.project.id,
            subject_type=SubjectType.WORKTREE,
            subject_key=worktree.path,
            detail={
                "disposition": QUARANTINED if reasons else REMOVABLE,
                "reasons": reasons,
                "branch": branch,
                "head": worktree.head,
                "merged": merged,
                "discarded": history.latest_attempt_discarded,
                "modified": modified,
                "untracked": untracked,
                "latest_attempt": history.latest_attempt_id,
            },
            attempt_id=history.latest_attempt_id,
        )
