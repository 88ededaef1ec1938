"""What a claim decides on, read after the task's lock (SPEC §3), and what it inherits (SPEC §15.4).

`claim_state` reads, in statements of their own after the lock, the task's
unresolved blockers, its active attempt (live or lapsed), the attempt whose
work a new attempt would continue, a stale allocation and the latest event.
`ClaimState.inheritance` applies the one inheritance rule of
`leases.selectors.left_work` to what was read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from core.errors import ValidationFailed
from core.prepared import SAMPLE_INT, Prepared
from environments.models import EnvironmentKind
from leases.branches import validate_branch_name
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus
from leases.selectors import left_work, left_work_on_branch, unresolved_blockers
from leases.services.git_facts import validate_base_commit
from ledger.models import Event, Task, TaskComment
from ledger.paths import normalise_paths, validate_paths_mode
from ledger.selectors import active_decisions_of_outer_task


@dataclass(frozen=True)
class ClaimRequest:
    """What the claimant asked for, validated before any transaction starts."""

    lease_seconds: int | None = None
    branch: str | None = None
    base_commit: str | None = None
    environment: str | None = None
    environment_kind: str | None = None
    # SPEC §19: None takes the task's paths (and mode); normalised by `validate_claim_request`.
    paths: tuple[str, ...] | None = None
    paths_mode: str | None = None


def validate_claim_request(request: ClaimRequest) -> ClaimRequest:
    """The request, validated, with its paths normalised."""
    if request.paths is not None:
        request = replace(request, paths=tuple(normalise_paths(request.paths)))
    if request.paths_mode is not None:
        validate_paths_mode(request.paths_mode)
    lease_seconds, branch, base_commit = request.lease_seconds, request.branch, request.base_commit
    if request.environment is not None and request.environment_kind is not None:
        raise ValidationFailed("Ask for an environment by name or by kind, not both.")
    if request.environment_kind is not None and request.environment_kind not in EnvironmentKind.values:
        raise ValidationFailed(f"environment_kind must be one of {', '.join(EnvironmentKind.values)}.")
    if lease_seconds is not None and (isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int)):
        raise ValidationFailed("lease_seconds must be an integer.")
    if lease_seconds is not None and lease_seconds <= 0:
        raise ValidationFailed("lease_seconds must be positive.", details={"fields": {"lease_seconds": ["> 0"]}})
    if branch is not None:
        validate_branch_name(branch)
    if base_commit is not None:
        validate_base_commit(base_commit)
    return request


@dataclass(frozen=True)
class AttemptRow:
    """The columns of an earlier attempt a claim decides on."""

    id: int
    status: str
    lease_expires_at: datetime
    branch: str
    base_commit: str
    commits_ahead: int | None
    seen_commits_ahead: int | None
    holder: str
    kind: str


@dataclass(frozen=True)
class Inheritance:
    """The branch and base commit a new attempt continues from, and whose they were."""

    attempt_id: int
    branch: str
    base_commit: str


@dataclass(frozen=True)
class ClaimState:
    """The locked task and what a claim decides on, read after the lock.

    `active` is the task's active attempt (live or lapsed); `with_work` its
    latest ended attempt that left work on its branch; both None for a task
    never claimed.
    """

    task: Task
    has_unresolved_blockers: bool
    last_event_id: int | None
    # Whether the claim's work context has decisions and comments to read (issue 34: read in this
    # statement, the context skips the reads that would find nothing).
    has_active_decisions: bool = True
    has_comments: bool = True
    active: AttemptRow | None = None
    with_work: AttemptRow | None = None
    stale_allocation_id: int | None = None

    def live_until(self, now: datetime) -> datetime | None:
        """The live lease's expiry, or None when no lease is live at `now`."""
        if self.active is not None and self.active.lease_expires_at > now:
            return self.active.lease_expires_at
        return None

    def inheritance(self) -> Inheritance | None:
        """What a new attempt inherits, once a lapsed active attempt has been expired by this claim.

        That attempt is judged as expired (it is, from this claim on) by the
        same rule the query applied to the ended ones.
        """
        active = self.active
        if active is not None and _left_work(active, status=AttemptStatus.EXPIRED):
            return Inheritance(attempt_id=active.id, branch=active.branch, base_commit=active.base_commit)
        source = self.with_work
        if source is None:
            return None
        return Inheritance(attempt_id=source.id, branch=source.branch, base_commit=source.base_commit)


@functools.cache
def _state_columns() -> dict[str, Exists | Subquery]:
    """Blockers, latest attempt, last event, whether there are decisions and comments for the work
    context, of the outer task: built once, they hold no per-call value.

    Using them in a query resolves copies, so the originals are shared safely.
    Named, so the statement's columns say what they are (the bench's replay
    reads them by name).
    """
    return {
        "has_unresolved_blockers": Exists(unresolved_blockers()),
        "latest_attempt_id": Subquery(Attempt.objects.filter(task=OuterRef("pk")).order_by("-id").values("id")[:1]),
        "last_event_id": Subquery(Event.objects.order_by("-id").values("id")[:1]),
        "has_active_decisions": Exists(active_decisions_of_outer_task()),
        "has_comments": Exists(TaskComment.objects.filter(task=OuterRef("pk"))),
    }


_ROW_COLUMNS = (
    "id",
    "status",
    "lease_expires_at",
    "branch",
    "base_commit",
    "commits_ahead",
    "seen_commits_ahead",
    "agent__handle",
    "kind",
)


def _state_of(task_id: int) -> QuerySet[Task]:
    columns = _state_columns()
    return Task.objects.filter(pk=task_id).annotate(**columns).values_list(*columns)


def _attempt_rows(task_id: int, latest_attempt_id: int) -> QuerySet[Attempt]:
    latest_with_work = Attempt.objects.filter(left_work(), task=task_id).order_by("-id").values("id")[:1]
    stale = (
        Allocation.objects.filter(attempt__task=task_id, status=AllocationStatus.STALE).order_by("-id").values("id")[:1]
    )
    return (
        Attempt.objects.filter(Q(pk=latest_attempt_id) | Q(pk=Subquery(latest_with_work)))
        .order_by("-id")
        .values_list(*_ROW_COLUMNS, Subquery(stale))
    )


# Both statements compiled once (SPEC §20).
_STATE: Prepared[Task] = Prepared(_state_of, samples=({"task_id": SAMPLE_INT[0]}, {"task_id": SAMPLE_INT[1]}))
_ATTEMPT_ROWS: Prepared[Attempt] = Prepared(
    _attempt_rows,
    samples=(
        {"task_id": SAMPLE_INT[0], "latest_attempt_id": SAMPLE_INT[1]},
        {"task_id": SAMPLE_INT[1], "latest_attempt_id": SAMPLE_INT[0]},
    ),
)


def claim_state(task: Task) -> ClaimState:
    """The claim state of `task`, whose row this transaction has locked already.

    Read in statements of their own, after the lock: under READ COMMITTED a
    new statement sees every claim that committed before the lock was ours.
    (In the locking statement itself, subqueries would read the snapshot
    taken before it waited — the trap of SPEC §3.) The task's own columns
    come from the locking statement, which returns the row as locked.

    The first statement is small: blockers, the task's latest attempt, the
    last event, whether the work context has decisions and comments to
    read. Only a task with an attempt (a re-claim, or one taken meanwhile)
    needs a second: that attempt, the latest ended one that left
    work (often the same row), and a stale allocation. The latest attempt is
    the active one when there is one: a claim inserts an attempt only while
    the task has none active, and a terminal attempt never becomes active
    again.
    """
    ((has_unresolved_blockers, latest_attempt_id, last_event_id, has_decisions, has_comments),) = _STATE.rows(
        task_id=task.pk
    )
    state = ClaimState(
        task=task,
        has_unresolved_blockers=has_unresolved_blockers,
        last_event_id=last_event_id,
        has_active_decisions=has_decisions,
        has_comments=has_comments,
    )
    if latest_attempt_id is None:
        return state
    rows = _ATTEMPT_ROWS.rows(task_id=task.pk, latest_attempt_id=latest_attempt_id)
    attempts = [AttemptRow(*row[:-1]) for row in rows]
    state = replace(state, stale_allocation_id=rows[0][-1])
    latest = next(attempt for attempt in attempts if attempt.id == latest_attempt_id)
    if latest.status == AttemptStatus.ACTIVE:
        state = replace(state, active=latest)
    # The rows are the latest attempt and the one `left_work()` picked (one row when they are the same).
    with_work = next((attempt for attempt in attempts if _left_work(attempt, status=attempt.status)), None)
    return replace(state, with_work=with_work)


def _left_work(attempt: AttemptRow, *, status: str) -> bool:
    return left_work_on_branch(
        status=status,
        branch=attempt.branch,
        commits_ahead=attempt.commits_ahead,
        seen_commits_ahead=attempt.seen_commits_ahead,
        kind=attempt.kind,
    )
