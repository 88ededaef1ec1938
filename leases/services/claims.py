"""Claims: one leased attempt per task, every claim a new epoch (SPEC §3).

A claim, in one transaction: lock the task row, refuse if a live lease exists
(`TASK_TAKEN`) or the task is not claimable (`TASK_NOT_CLAIMABLE`), expire a
lapsed attempt, bump the epoch, insert the attempt with its hashed token and
label, append `attempt.claimed`. The partial unique index on active attempts
is the last line of defence; hitting it is reported as `TASK_TAKEN`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import IntegrityError
from django.db.models import Exists, OuterRef, Subquery

from config.db import write_transaction
from config.errors import PermissionDenied, TaskNotClaimable, TaskTaken, ValidationFailed
from environments.models import EnvironmentKind
from leases.branches import suggest_branch_name, validate_branch_name
from leases.labels import Label, render_label
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus
from leases.selectors import claimable_tasks, lease_seconds_for, unresolved_blockers
from leases.services.allocations import bind_allocation, choose_environment
from leases.services.expiry import expire_lapsed
from leases.services.tallies import tally_claim_refusal
from leases.tokens import new_lease_token
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, Event, EventType, Project, Task, TaskStatus
from ledger.services import event_append, lock_task

RENEW_ATTEMPTS = 3
# Claim-next re-verifies each locked candidate; this bounds the walk.
CLAIM_NEXT_MAX_CANDIDATES = 64
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
INHERITING_STATUSES = (AttemptStatus.EXPIRED, AttemptStatus.INTERRUPTED)


class _ClaimCollided(TaskTaken):
    """The active-attempt index refused the insert: TASK_TAKEN, and the transaction is spoiled."""


@dataclass(frozen=True)
class LeaseGrant:
    """What a claim returns. `token` is shown to the claimant once and never stored."""

    attempt: Attempt
    token: str
    task: Task
    allocation: Allocation | None = None

    @property
    def renew_every_seconds(self) -> int:
        return max(1, self.attempt.lease_seconds // 3)

    @property
    def renew_attempts(self) -> int:
        return RENEW_ATTEMPTS


def validate_base_commit(base_commit: str) -> str:
    if not COMMIT_SHA.match(base_commit):
        raise ValidationFailed(
            "base_commit must be a 40-character lowercase hex commit id.",
            details={"fields": {"base_commit": ["40 lowercase hex characters"]}},
        )
    return base_commit


def _validate_claim_input(request: ClaimRequest) -> None:
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


@dataclass(frozen=True)
class ClaimState:
    """The locked task and what a claim decides on, read after the lock.

    The `active_*` fields describe the task's active attempt (live or
    lapsed), `previous_*` its latest terminal attempt when it has no active
    one; both stay None for a task never claimed.
    """

    task: Task
    has_unresolved_blockers: bool
    last_event_id: int | None
    active_attempt_id: int | None = None
    active_lease_expires_at: datetime | None = None
    active_holder: str | None = None
    active_branch: str | None = None
    previous_status: str | None = None
    previous_branch: str | None = None
    stale_allocation_id: int | None = None


@functools.cache
def _state_columns() -> dict[str, Exists | Subquery]:
    """Blockers, latest attempt, last event of the outer task: built once, they hold no per-call value.

    Using them in a query resolves copies, so the originals are shared safely.
    Named, so the statement's columns say what they are (the bench's replay
    reads them by name).
    """
    return {
        "has_unresolved_blockers": Exists(unresolved_blockers()),
        "latest_attempt_id": Subquery(Attempt.objects.filter(task=OuterRef("pk")).order_by("-id").values("id")[:1]),
        "last_event_id": Subquery(Event.objects.order_by("-id").values("id")[:1]),
    }


def _claim_state(task: Task) -> ClaimState:
    """The claim state of `task`, whose row this transaction has locked already.

    Read in statements of their own, after the lock: under READ COMMITTED a
    new statement sees every claim that committed before the lock was ours.
    (In the locking statement itself, subqueries would read the snapshot
    taken before it waited — the trap of SPEC §3.) The task's own columns
    come from the locking statement, which returns the row as locked.

    The first statement is small: blockers, the task's latest attempt, the
    last event. Only a task with an attempt (a re-claim, or one taken
    meanwhile) needs a second, for that attempt and a stale allocation. The
    latest attempt is the active one when there is one: a claim inserts an
    attempt only while the task has none active, and a terminal attempt
    never becomes active again.
    """
    columns = _state_columns()
    has_unresolved_blockers, latest_attempt_id, last_event_id = (
        Task.objects.filter(pk=task.pk).annotate(**columns).values_list(*columns).get()
    )
    state = ClaimState(task=task, has_unresolved_blockers=has_unresolved_blockers, last_event_id=last_event_id)
    if latest_attempt_id is None:
        return state
    status, lease_expires_at, branch, holder, stale_allocation_id = (
        Attempt.objects.filter(pk=latest_attempt_id)
        .values_list(
            "status",
            "lease_expires_at",
            "branch",
            "agent__handle",
            Subquery(
                Allocation.objects.filter(attempt__task=task.pk, status=AllocationStatus.STALE)
                .order_by("-id")
                .values("id")[:1]
            ),
        )
        .get()
    )
    if status == AttemptStatus.ACTIVE:
        return replace(
            state,
            active_attempt_id=latest_attempt_id,
            active_lease_expires_at=lease_expires_at,
            active_holder=holder,
            active_branch=branch,
            stale_allocation_id=stale_allocation_id,
        )
    return replace(state, previous_status=status, previous_branch=branch, stale_allocation_id=stale_allocation_id)


def _live_holder(state: ClaimState, now: datetime) -> bool:
    return state.active_lease_expires_at is not None and state.active_lease_expires_at > now


def _refuse_unless_claimable(state: ClaimState, *, agent: Agent, now: datetime) -> None:
    task = state.task
    if _live_holder(state, now):
        expires = state.active_lease_expires_at.isoformat() if state.active_lease_expires_at else None
        raise TaskTaken(
            f"{task.key} is held by {state.active_holder} until {expires}.",
            details={"task": task.key, "holder": state.active_holder, "lease_expires_at": expires},
        )
    reason = None
    if task.project.archived_at is not None:
        reason = "project_archived"
    elif task.status != TaskStatus.READY:
        reason = f"status_{task.status}"
    elif state.has_unresolved_blockers:
        reason = "unresolved_blockers"
    elif task.reserved_for_id is not None and task.reserved_for_id != agent.pk:
        reason = "reserved_for_another_agent"
    if reason is not None:
        raise TaskNotClaimable(
            f"{task.key} cannot be claimed ({reason.replace('_', ' ')}).",
            details={"task": task.key, "reason": reason, "status": task.status},
        )


@dataclass(frozen=True)
class ClaimRequest:
    """What the claimant asked for, validated before any transaction starts."""

    lease_seconds: int | None = None
    branch: str | None = None
    base_commit: str | None = None
    environment: str | None = None
    environment_kind: str | None = None


def _claim_locked(state: ClaimState, *, agent: Agent, now: datetime, request: ClaimRequest) -> LeaseGrant:
    _refuse_unless_claimable(state, agent=agent, now=now)
    task = state.task
    inherited_branch = ""
    stale_allocation_id = state.stale_allocation_id
    if state.active_attempt_id is not None:
        expire_lapsed([state.active_attempt_id], now=now)
        inherited_branch = state.active_branch or ""
        # Expiry just made the dead attempt's allocation stale: that is the one to inherit.
        stale_allocation_id = (
            Allocation.objects.filter(attempt_id=state.active_attempt_id, status=AllocationStatus.STALE)
            .values_list("id", flat=True)
            .first()
            or stale_allocation_id
        )
    elif state.previous_status in INHERITING_STATUSES:
        inherited_branch = state.previous_branch or ""

    environment = choose_environment(
        task=task,
        environment=request.environment,
        environment_kind=request.environment_kind,
        stale_allocation_id=stale_allocation_id,
    )
    epoch = task.epoch + 1
    Task.objects.filter(pk=task.pk).update(epoch=epoch)  # claims bump the epoch, never the version
    task.epoch = epoch
    seconds = lease_seconds_for(task=task, requested=request.lease_seconds)
    branch_name = (
        request.branch
        or inherited_branch
        or suggest_branch_name(agent_kind=agent.kind, task_key=task.key, title=task.title)
    )
    token, salt, token_hash = new_lease_token(task_id=task.pk, epoch=epoch)
    label = render_label(
        Label(
            owner=agent.handle,
            branch=branch_name,
            env=environment.environment.name if environment else None,
            task=task.key,
            epoch=epoch,
        )
    )
    try:
        attempt = Attempt.objects.create(
            task=task,
            agent=agent,
            epoch=epoch,
            status=AttemptStatus.ACTIVE,
            token_hash=token_hash,
            token_salt=salt,
            lease_seconds=seconds,
            lease_expires_at=now + timedelta(seconds=seconds),
            claimed_at=now,
            branch=branch_name,
            base_commit=request.base_commit or "",
            label=label,
            task_version_at_claim=task.version,
            event_id_at_claim=state.last_event_id,
        )
    except IntegrityError:
        # Unreachable while claims lock the task row; the index still decides.
        raise _ClaimCollided(f"{task.key} was claimed concurrently.", details={"task": task.key}) from None
    event_append(
        type=EventType.ATTEMPT_CLAIMED,
        actor=Actor(agent=agent),
        at=now,
        task=task,
        attempt_id=attempt.pk,
        payload={"agent": agent.handle, "epoch": epoch, "lease_seconds": seconds, "branch": branch_name},
    )
    allocation = bind_allocation(environment, attempt=attempt, now=now) if environment else None
    return LeaseGrant(attempt=attempt, token=token, task=task, allocation=allocation)


@write_transaction
def _claim(*, task_id: int, agent: Agent, request: ClaimRequest) -> LeaseGrant:
    now = clock.now()
    return _claim_locked(_claim_state(lock_task(task_id)), agent=agent, now=now, request=request)


def lease_claim(
    *,
    task: Task,
    agent: Agent,
    lease_seconds: int | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    environment: str | None = None,
    environment_kind: str | None = None,
) -> LeaseGrant:
    """Claim this task for `agent`: a new attempt under a fresh lease and epoch."""
    request = ClaimRequest(lease_seconds, branch, base_commit, environment, environment_kind)
    _validate_claim_input(request)
    _refuse_inactive(agent)
    try:
        return _claim(task_id=task.pk, agent=agent, request=request)
    except TaskTaken:
        tally_claim_refusal(project_id=task.project_id, agent=agent)
        raise


def _refuse_inactive(agent: Agent) -> None:
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")


@write_transaction
def _claim_next(*, project: Project, agent: Agent, task_class: str | None, request: ClaimRequest) -> LeaseGrant | None:
    now = clock.now()
    candidates = (
        claimable_tasks(project=project, now=now, agent=agent, task_class=task_class)
        .select_related("project")
        .select_for_update(skip_locked=True, no_key=True, of=("self",))
    )
    passed_over: list[int] = []
    for _ in range(CLAIM_NEXT_MAX_CANDIDATES):
        # The row comes back locked (SKIP LOCKED) and as locked: its own columns are current.
        candidate = (candidates.exclude(pk__in=passed_over) if passed_over else candidates).first()
        if candidate is None:
            break
        # The candidate query's NOT EXISTS saw its statement's snapshot; a claim
        # that committed since is only visible to a new statement. Re-verify.
        try:
            return _claim_locked(_claim_state(candidate), agent=agent, now=now, request=request)
        except _ClaimCollided:
            raise  # the transaction is spoiled; the caller sees TASK_TAKEN
        except (TaskTaken, TaskNotClaimable):
            passed_over.append(candidate.pk)
    if passed_over:
        raise TaskTaken(
            "Every claimable task was taken by another agent meanwhile; ask again.",
            details={"project": project.slug, "passed_over": len(passed_over)},
        )
    return None


def lease_claim_next(
    *,
    project: Project,
    agent: Agent,
    task_class: str | None = None,
    lease_seconds: int | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    environment: str | None = None,
    environment_kind: str | None = None,
) -> LeaseGrant | None:
    """Claim the project's next claimable task (priority, then age); None when there is none.

    On PostgreSQL candidates are taken with FOR NO KEY UPDATE SKIP LOCKED, so
    agents do not queue on one row; on SQLite the IMMEDIATE transaction
    serializes. Environment refusals are not "taken": they end the call.
    """
    request = ClaimRequest(lease_seconds, branch, base_commit, environment, environment_kind)
    _validate_claim_input(request)
    _refuse_inactive(agent)
    try:
        return _claim_next(project=project, agent=agent, task_class=task_class, request=request)
    except TaskTaken:
        tally_claim_refusal(project_id=project.pk, agent=agent)
        raise
