"""Removing removable orphan worktrees: `manage.py reconcile --prune-worktrees`, and nothing else.

The only deletion reconciliation ever makes, so every check is made again
right before it: no live attempt names the branch now, the worktree is
still clean, and `git worktree remove` runs without `--force`, so git itself
refuses anything dirty or locked. Branches are never deleted: the commits
stay reachable from the branch.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from core.db import write_transaction
from leases.selectors import live_attempts
from ledger.actors import SYSTEM
from reconciliation.conditions import Observation
from reconciliation.git import GitError, LocalRepository, worktree_cleanliness
from reconciliation.git_conditions import REMOVABLE
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Condition, Finding, SubjectType
from reconciliation.snapshot import LedgerSnapshot
from reconciliation.triage import RECONCILIATION_ACTOR, resolve_finding_locked

PRUNED_NOTE = "worktree removed by reconcile --prune-worktrees"


def removable_worktrees(observations: Iterable[Observation]) -> list[Observation]:
    return [
        observation
        for observation in observations
        if observation.condition == Condition.ORPHAN_WORKTREE and observation.detail.get("disposition") == REMOVABLE
    ]


def prune_worktrees(
    *, snapshot: LedgerSnapshot, observations: Iterable[Observation], now: datetime
) -> tuple[list[str], list[dict[str, Any]]]:
    """Remove each removable worktree that still qualifies; returns (removed paths, errors)."""
    projects = {project.id: project for project in snapshot.projects}
    removed: list[str] = []
    errors: list[dict[str, Any]] = []
    for observation in removable_worktrees(observations):
        project = projects[observation.project_id]
        path, branch = observation.subject_key, str(observation.detail["branch"])
        if live_attempts(now).filter(task__project_id=project.id, branch=branch).exists():
            continue  # claimed meanwhile: the worktree has a holder again
        try:
            if not worktree_cleanliness(path).clean:
                continue  # written to meanwhile: quarantined at the next run
            LocalRepository(project.repository).remove_worktree(path)
        except GitError as exc:
            errors.append({"project": project.slug, "worktree": path, "message": str(exc)})
            continue
        removed.append(path)
        _resolve_pruned(project_id=project.id, path=path, now=now)
    return removed, errors


@write_transaction
def _resolve_pruned(*, project_id: int, path: str, now: datetime) -> None:
    finding = Finding.objects.filter(
        project_id=project_id,
        condition=Condition.ORPHAN_WORKTREE,
        subject_type=SubjectType.WORKTREE,
        subject_key=path,
        status__in=UNRESOLVED_FINDING_STATUSES,
    ).first()
    if finding is not None:
        resolve_finding_locked(finding, actor=SYSTEM, by=RECONCILIATION_ACTOR, now=now, note=PRUNED_NOTE)
