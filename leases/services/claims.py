"""Claims: one leased attempt per task, every claim a new epoch (SPEC §3).

A claim, in one transaction: lock the task row, refuse if a live lease exists
(`TASK_TAKEN`) or the task is not claimable (`TASK_NOT_CLAIMABLE`), expire a
lapsed attempt, bump the epoch, insert the attempt with its hashed token and
label, append `attempt.claimed`. The partial unique index on active attempts
is the last line of defence; hitting it is reported as `TASK_TAKEN`. The new
attempt inherits the branch and base commit of the latest ended attempt that
left work on its branch (SPEC §15.4; `leases.services.claim_state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import IntegrityError

from core.combined import combines, insert_part, run_combined
from core.db import write_transaction
from core.errors import AgentPaused, PathsReserved, PermissionDenied, TaskNotClaimable, TaskTaken
from core.prepared import SAMPLE_INT, PreparedUpdate, insert
from leases.branches import suggest_branch_name
from leases.labels import Label, render_label
from leases.models import Allocation, AllocationStatus, Attempt, AttemptKind, AttemptStatus
from leases.selectors import lease_seconds_for, missing_labels
from leases.services.allocations import EnvironmentChoice, bind_allocation, choose_environment
from leases.services.claim_state import ClaimRequest, ClaimState, Inheritance, claim_state, validate_claim_request
from leases.services.expiry import expire_lapsed
from leases.services.path_reservations import PathsClaim, claimed_paths, refuse_overlap, reserve
from leases.services.tallies import tally_claim_refusal
from leases.services.usage import claim_budget_refusal
from leases.tokens import new_lease_token
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, Event, EventType, Severity, Task, TaskStatus
from ledger.services import event_append, event_row, lock_task

RENEW_ATTEMPTS = 3


class ClaimCollided(TaskTaken):
    """The active-attempt index refused the insert: TASK_TAKEN, and the transaction is spoiled."""


class _Quarantined(TaskNotClaimable):
    """Expiring the lapsed attempt completed a streak of failures (SPEC §16.4): refused, and the
    quarantine commits."""


@dataclass(frozen=True)
class ReviewClaim:
    """A review attempt's claim (SPEC §16.1): of a task in review, on the branch of the work reviewed.

    The claim is the work claim's, step for step (lock, refuse, expire, epoch, token, label, event);
    only claimability and the branch differ. `leases.services.reviews` decides which request.
    """

    branch: str
    base_commit: str


@dataclass(frozen=True)
class LeaseGrant:
    """What a claim returns. `token` is shown to the claimant once and never stored."""

    attempt: Attempt
    token: str
    task: Task
    allocation: Allocation | None = None
    # The earlier attempt whose branch and base commit this one inherited (SPEC §15.4).
    predecessor_id: int | None = None
    # The paths this attempt reserved (SPEC §19), or None.
    reservation: PathsClaim | None = None
    # The work context's parts the claim's own state read found empty ("blockers", "decisions",
    # "comments"): the context answers them without a read (issue 34).
    known_empty: frozenset[str] = frozenset()

    @property
    def renew_every_seconds(self) -> int:
        return max(1, self.attempt.lease_seconds // 3)

    @property
    def renew_attempts(self) -> int:
        return RENEW_ATTEMPTS


# The claim's one write of the task row: the new epoch, and `held` (SPEC §25), which the attempt's insert
# trigger would otherwise set in a second write of the row (it finds the mark set and writes nothing). A claim
# that fails after it leaves its transaction spoiled and rolled back, the mark with it.
_EPOCH_BUMP = PreparedUpdate(
    lambda task_id, epoch: (Task.objects.filter(pk=task_id), {"epoch": epoch, "held": True}),
    samples=({"task_id": SAMPLE_INT[0], "epoch": SAMPLE_INT[1]}, {"task_id": SAMPLE_INT[1], "epoch": SAMPLE_INT[0]}),
)


_TASK_TABLE = Task._meta.db_table


def _refuse_if_held(state: ClaimState, *, now: datetime) -> None:
    """One live lease per task (SPEC §3): a task whose lease is live is TASK_TAKEN."""
    live_until = state.live_until(now)
    if live_until is not None:
        task = state.task
        holder, expires = state.active.holder if state.active else None, live_until.isoformat()
        raise TaskTaken(
            f"{task.key} is held by {holder} until {expires}.",
            details={"task": task.key, "holder": holder, "lease_expires_at": expires},
        )


def _not_claimable_reason(state: ClaimState, *, agent: Agent, review: bool) -> str | None:
    """Why the task may not be claimed (SPEC §2, §16.1), or None: an archived project, a status
    other than ready (review, for a review claim), unresolved blockers, a reservation for another agent.
    """
    task = state.task
    if task.project.archived_at is not None:
        return "project_archived"
    if review:
        return None if task.status == TaskStatus.REVIEW else f"status_{task.status}"
    if task.status != TaskStatus.READY:
        return f"status_{task.status}"
    if state.has_unresolved_blockers:
        return "unresolved_blockers"
    if task.reserved_for_id is not None and task.reserved_for_id != agent.pk:
        return "reserved_for_another_agent"
    if missing_labels(requires=task.requires, labels=agent.labels):
        return "requires"  # SPEC §23.1: the agent lacks a label the task requires (not asked of reviews)
    return None


def _refuse_unless_claimable(
    state: ClaimState,
    *,
    agent: Agent,
    now: datetime,
    review: bool = False,
    budget_scopes: tuple[str, ...] = ("task", "agent", "project"),
) -> None:
    """Refuse a held task (TASK_TAKEN), then one not claimable (TASK_NOT_CLAIMABLE), then a spent
    budget (SPEC §19), in that order."""
    _refuse_if_held(state, now=now)
    task = state.task
    reason = _not_claimable_reason(state, agent=agent, review=review)
    if reason == "requires":
        missing = missing_labels(requires=task.requires, labels=agent.labels)
        raise TaskNotClaimable(
            f"{task.key} requires labels {agent.handle} does not carry: {', '.join(missing)}.",
            details={
                "task": task.key,
                "reason": reason,
                "status": task.status,
                "requires": task.requires,
                "missing": missing,
            },
        )
    if reason is not None:
        raise TaskNotClaimable(
            f"{task.key} cannot be claimed ({reason.replace('_', ' ')}).",
            details={"task": task.key, "reason": reason, "status": task.status},
        )
    refusal = claim_budget_refusal(task=task, agent=agent, project=task.project, now=now, scopes=budget_scopes)
    if refusal is not None:
        raise refusal


def _refuse_overlapping_paths(state: ClaimState, *, request: ClaimRequest, now: datetime) -> PathsClaim | None:
    """The paths this claim reserves (SPEC §19), refused (PATHS_RESERVED) when another live attempt's
    overlap them; said before any write, so that claim-next passes over a candidate refused here."""
    paths = claimed_paths(state.task, paths=request.paths, mode=request.paths_mode)
    if paths is not None:
        refuse_overlap(paths, task=state.task, now=now)
    return paths


def _expire_lapsed_holder(state: ClaimState, *, now: datetime, review: bool) -> int | None:
    """Expire the task's lapsed active attempt, if any, and say which stale allocation to inherit.

    Expiry may complete a streak of failures that quarantines a work task (SPEC §16.4): the claim
    is then refused, and the quarantine commits. Expiry makes the dead attempt's allocation stale:
    that one is inherited before any older stale one.
    """
    if state.active is None:
        return state.stale_allocation_id
    task = state.task
    expire_lapsed([state.active.id], now=now)
    if not review and Task.objects.filter(pk=task.pk, status=TaskStatus.BLOCKED).exists():
        raise _Quarantined(
            f"{task.key} was quarantined: its attempts keep failing.",
            details={"task": task.key, "reason": "quarantined", "status": TaskStatus.BLOCKED},
        )
    return (
        Allocation.objects.filter(attempt_id=state.active.id, status=AllocationStatus.STALE)
        .values_list("id", flat=True)
        .first()
        or state.stale_allocation_id
    )


def _inherit(
    state: ClaimState, *, request: ClaimRequest, review: ReviewClaim | None
) -> tuple[ClaimRequest, Inheritance | None]:
    """The request as the new attempt takes it, and what it inherits (SPEC §15.4, §16.1).

    A work claim inherits the branch and base commit of the work it continues, unless it names
    another branch (then it starts afresh); a review claim inherits nothing and works on the
    branch and base commit of the work reviewed unless it names its own.
    """
    if review is not None:
        request = replace(request, branch=request.branch or review.branch or None)
        request = replace(request, base_commit=request.base_commit or review.base_commit or None)
        return request, None
    inherited = state.inheritance()
    if inherited is not None and request.branch is not None and request.branch != inherited.branch:
        inherited = None
    return request, inherited


def _new_attempt(
    state: ClaimState,
    *,
    epoch: int,
    agent: Agent,
    now: datetime,
    request: ClaimRequest,
    inherited: Inheritance | None,
    environment: EnvironmentChoice | None,
    review: bool,
) -> tuple[Attempt, str]:
    """The new epoch's active attempt, unsaved, with its hashed token and label, and its token."""
    task = state.task
    seconds = lease_seconds_for(task=task, requested=request.lease_seconds)
    branch_name = (
        request.branch
        or (inherited.branch if inherited else "")
        or suggest_branch_name(agent_kind=agent.kind, task_key=task.key, title=task.title)
    )
    base_commit = request.base_commit or (inherited.base_commit if inherited else "")
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
    attempt = Attempt(
        task=task,
        agent=agent,
        epoch=epoch,
        status=AttemptStatus.ACTIVE,
        kind=AttemptKind.REVIEW if review else AttemptKind.WORK,
        token_hash=token_hash,
        token_salt=salt,
        lease_seconds=seconds,
        lease_expires_at=now + timedelta(seconds=seconds),
        claimed_at=now,
        branch=branch_name,
        base_commit=base_commit,
        label=label,
        task_version_at_claim=task.version,
        event_id_at_claim=state.last_event_id,
    )
    return attempt, token


def _claimed_event(attempt: Attempt, *, agent: Agent, now: datetime, review: bool) -> Event:
    """The claim's `attempt.claimed` event, unsaved (its attempt id is the inserted attempt's)."""
    return event_row(
        type=EventType.ATTEMPT_CLAIMED,
        actor=Actor(agent=agent),
        at=now,
        task=attempt.task,
        attempt_id=attempt.pk,
        payload={
            "agent": agent.handle,
            "epoch": attempt.epoch,
            "lease_seconds": attempt.lease_seconds,
            "branch": attempt.branch,
            **({"kind": AttemptKind.REVIEW} if review else {}),
        },
    )


def _open_epoch(task: Task, attempt: Attempt, *, agent: Agent, now: datetime, review: bool) -> None:
    """Bump the task's epoch (every claim a new epoch, SPEC §3) and mark it held (never the version),
    insert the attempt and append `attempt.claimed`: on PostgreSQL one statement, on SQLite three.

    The partial unique index on active attempts is the last line of defence: hitting it is
    `ClaimCollided` (TASK_TAKEN).
    """
    try:
        if combines():
            bump = f"UPDATE {_TASK_TABLE} SET epoch = %s, held = true WHERE id = %s"  # noqa: S608
            inserted, inserted_params = insert_part(attempt)
            event, event_params = insert_part(
                _claimed_event(attempt, agent=agent, now=now, review=review),
                source="attempt",
                computed={"attempt_id": "attempt.id"},
            )
            ((attempt.pk,),) = run_combined(
                [
                    ("bumped", bump, [attempt.epoch, task.pk]),
                    ("attempt", f"{inserted} RETURNING id", inserted_params),
                    ("event", event, event_params),
                ],
                ("SELECT id FROM attempt", []),
            )
            attempt._state.adding = False
            attempt._state.db = "default"
        else:
            _EPOCH_BUMP.run(task_id=task.pk, epoch=attempt.epoch)
            insert(attempt)
            insert(_claimed_event(attempt, agent=agent, now=now, review=review))
    except IntegrityError:
        # Unreachable while claims lock the task row; the index still decides.
        raise ClaimCollided(f"{task.key} was claimed concurrently.", details={"task": task.key}) from None
    task.epoch = attempt.epoch
    task.held = True


def claim_locked(
    state: ClaimState,
    *,
    agent: Agent,
    now: datetime,
    request: ClaimRequest,
    review: ReviewClaim | None = None,
    budget_scopes: tuple[str, ...] = ("task", "agent", "project"),
) -> LeaseGrant:
    """The claim of a task whose row this transaction has locked, for work or (with `review`) for a
    review: refuse unless claimable, reserve paths, expire the lapsed attempt, open the next epoch.

    Raises `ClaimCollided` when a concurrent claim won the active-attempt index; the transaction
    is then spoiled and the caller must leave it.
    """
    # A review is not refused for the work's spent task budget (its request would wait for ever);
    # the reviewer's and the project's daily budgets still apply.
    scopes = budget_scopes if review is None else tuple(scope for scope in budget_scopes if scope != "task")
    _refuse_unless_claimable(state, agent=agent, now=now, review=review is not None, budget_scopes=scopes)
    paths = _refuse_overlapping_paths(state, request=request, now=now)
    stale_allocation_id = _expire_lapsed_holder(state, now=now, review=review is not None)
    request, inherited = _inherit(state, request=request, review=review)
    task = state.task
    environment = choose_environment(
        task=task,
        environment=request.environment,
        environment_kind=request.environment_kind,
        stale_allocation_id=stale_allocation_id,
    )
    attempt, token = _new_attempt(
        state,
        epoch=task.epoch + 1,
        agent=agent,
        now=now,
        request=request,
        inherited=inherited,
        environment=environment,
        review=review is not None,
    )
    _open_epoch(task, attempt, agent=agent, now=now, review=review is not None)
    allocation = bind_allocation(environment, attempt=attempt, now=now) if environment else None
    if paths is not None:
        reserve(paths, attempt=attempt, now=now)
    return LeaseGrant(
        attempt=attempt,
        token=token,
        task=task,
        allocation=allocation,
        predecessor_id=inherited.attempt_id if inherited else None,
        reservation=paths,
        known_empty=_empty_context_parts(state),
    )


def _empty_context_parts(state: ClaimState) -> frozenset[str]:
    """What the state read, inside this transaction, found nothing of for the work context."""
    found = {
        "blockers": state.has_unresolved_blockers,
        "decisions": state.has_active_decisions,
        "comments": state.has_comments,
    }
    return frozenset(part for part, present in found.items() if not present)


@write_transaction
def _claim(*, task_id: int, agent: Agent, request: ClaimRequest) -> LeaseGrant | TaskNotClaimable:
    now = clock.now()
    try:
        return claim_locked(claim_state(lock_task(task_id)), agent=agent, now=now, request=request)
    except _Quarantined as refusal:
        return refusal  # answered after the quarantine commits


def lease_claim(
    *,
    task: Task,
    agent: Agent,
    lease_seconds: int | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    environment: str | None = None,
    environment_kind: str | None = None,
    paths: Sequence[str] | None = None,
    paths_mode: str | None = None,
) -> LeaseGrant:
    """Claim this task for `agent`: a new attempt under a fresh lease and epoch.

    `paths` (default: the task's) are reserved for as long as the lease lives;
    an overlap with another live attempt's answers PATHS_RESERVED (SPEC §19).
    """
    request = validate_claim_request(
        ClaimRequest(
            lease_seconds,
            branch,
            base_commit,
            environment,
            environment_kind,
            None if paths is None else tuple(paths),
            paths_mode,
        )
    )
    refuse_inactive(agent)
    try:
        granted = _claim(task_id=task.pk, agent=agent, request=request)
    except TaskTaken:
        tally_claim_refusal(project_id=task.project_id, agent=agent)
        raise
    except PathsReserved as refusal:
        _record_paths_refusal(task=task, agent=agent, refusal=refusal)
        raise
    if isinstance(granted, TaskNotClaimable):
        raise granted
    return granted


@write_transaction
def _record_paths_refusal(*, task: Task, agent: Agent, refusal: PathsReserved) -> None:
    """`claim.paths_refused`, once per refusal: the claim's own transaction rolled back, so its own small one.

    The reservation that refused it is named (holder, task, attempt, paths), so the refusal is visible
    in the console and the event feed, not only to the agent that was refused.
    """
    details = refusal.details if isinstance(refusal.details, dict) else {}
    event_append(
        type=EventType.CLAIM_PATHS_REFUSED,
        severity=Severity.WARN,
        actor=Actor(agent=agent),
        at=clock.now(),
        task=task,
        payload={
            "holder": details.get("holder"),
            "holder_task": details.get("task"),
            "holder_attempt": details.get("attempt"),
            "mode": details.get("mode"),
            "paths": list(details.get("paths") or [])[:20],
            "requested": list(details.get("requested") or [])[:20],
        },
    )


def refuse_inactive(agent: Agent) -> None:
    """A deactivated agent claims nothing (SPEC §3); nor does a paused (drained) one (`AGENT_PAUSED`).

    `agent` is read by the request's authentication, so a pause holds from the next request on.
    """
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")
    if agent.claims_paused_at is not None:
        raise AgentPaused(
            f"Agent {agent.handle} is paused: it claims no new work; finish or release what it holds.",
            details={"agent": agent.handle, "paused_at": agent.claims_paused_at.isoformat()},
        )
