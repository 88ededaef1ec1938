"""The compact task and the attempt summary as plain dicts, for the measured hot paths.

Claim, claim-next and finish answer these shapes on every cycle of every
agent (the pinned query counts in `tests/api/test_query_counts.py` and the
bench measure them), so they skip the serializers' per-field machinery;
`leases.apis.serializers` documents the same shapes and renders them
everywhere else, and `tests/api/test_projections.py` checks that both agree.
"""

from __future__ import annotations

from typing import Any

from core.errors import ValidationFailed
from leases.labels import parse_label
from leases.models import Allocation, Attempt
from leases.selectors import effective_status_of_kind, is_claimable, unresolved_blocker_count
from ledger import clock
from ledger.models import Agent, Task

# The row of a compact task: `with_compact_state(...).values(*COMPACT_TASK_FIELDS)`.
COMPACT_TASK_FIELDS = (
    "id",
    "key",
    "title",
    "status",
    "effective_status",
    "priority",
    "task_class",
    "requires",
    "version",
    "epoch",
    "holder_handle",
    "lease_expires_at",
    "blocked_by_count",
    "claimable",
)


def compact_task(row: dict[str, Any]) -> dict[str, Any]:
    """A `with_compact_state(...).values(*COMPACT_TASK_FIELDS)` row as the compact list item."""
    return {
        "key": row["key"],
        "title": row["title"],
        "status": row["status"],
        "effective_status": row["effective_status"],
        "priority": row["priority"],
        "task_class": row["task_class"],
        "requires": row["requires"],
        "version": row["version"],
        "epoch": row["epoch"],
        "holder": row["holder_handle"],
        "lease_expires_at": clock.iso(row["lease_expires_at"]),
        "blocked_by": row["blocked_by_count"],
        "claimable": row["claimable"],
    }


def held_compact_task(task: Task, attempt: Attempt) -> dict[str, Any]:
    """The compact item of a task just claimed by `attempt`, without a query.

    A claim succeeds only on a task without unresolved blockers, and the
    claim's transaction saw that, so `blocked_by` is 0.
    """
    return compact_task(
        {
            "key": task.key,
            "title": task.title,
            "status": task.status,
            "effective_status": effective_status_of_kind(attempt.kind),
            "priority": task.priority,
            "task_class": task.task_class,
            "requires": task.requires,
            "version": task.version,
            "epoch": task.epoch,
            "holder_handle": attempt.agent.handle,
            "lease_expires_at": attempt.lease_expires_at,
            "blocked_by_count": 0,
            "claimable": False,  # held
        }
    )


def ended_task_row(task: Task, agent: Agent | None = None, *, blocked_by: int | None = None) -> dict[str, Any]:
    """The compact row of `task` as its attempt just ended: the state of that commit.

    No live lease exists then (one active attempt per task, and it just
    ended), so the lease columns need no subqueries; only the blocker count
    is read, unless the caller's service read it already (`blocked_by`: a
    finish's lock statement). `claimable` is for `agent` (the holder that ended it).
    """
    if blocked_by is None:
        blocked_by = unresolved_blocker_count(task)
    return {
        "id": task.pk,
        "key": task.key,
        "title": task.title,
        "status": task.status,
        "effective_status": task.status,
        "priority": task.priority,
        "task_class": task.task_class,
        "requires": task.requires,
        "version": task.version,
        "epoch": task.epoch,
        "holder_handle": None,
        "lease_expires_at": None,
        "blocked_by_count": blocked_by,
        "claimable": is_claimable(task=task, agent=agent, blocked_by=blocked_by, live=False),
    }


def environment_name(attempt: Attempt) -> str | None:
    """The environment the attempt was given, as its server-written label names it (no query)."""
    try:
        return parse_label(attempt.label).env
    except ValidationFailed:
        return None


def attempt_summary(attempt: Attempt, *, allocation: Allocation | None = None) -> dict[str, Any]:
    return {
        "id": attempt.pk,
        "task": attempt.task.key,
        "epoch": attempt.epoch,
        "status": attempt.status,
        "lease_expires_at": clock.iso(attempt.lease_expires_at),
        "branch": attempt.branch or None,
        "base_commit": attempt.base_commit or None,
        "environment": allocation.environment.name if allocation is not None else environment_name(attempt),
        "label": attempt.label,
        "head_commit": attempt.head_commit,
        "commits_ahead": attempt.commits_ahead,
        "dirty": attempt.dirty,
        "pushed": attempt.pushed,
        "worktree_path": attempt.worktree_path,
        "host": attempt.host,
    }
