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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection
from django.db.models import QuerySet

from core.db import write_transaction
from core.errors import PathsReserved, PermissionDenied, TaskNotClaimable, TaskTaken
from core.prepared import SAMPLE_INT, SAMPLE_TIME, Prepared, PreparedUpdate, insert
from leases.branches import suggest_branch_name
from leases.labels import Label, render_label
from leases.models import Allocation, AllocationStatus, Attempt, AttemptKind, AttemptStatus
from leases.selectors import claimable_tasks, lease_seconds_for
from leases.services.allocations import EnvironmentChoice, bind_allocation, choose_environment
from leases.services.claim_state import ClaimRequest, ClaimState, Inheritance, claim_state, validate_claim_request
from leases.services.expiry import expire_lapsed
from leases.services.reservations import PathsClaim, claimed_paths, refuse_overlap, reserve
from leases.services.tallies import tally_claim_refusal
from leases.services.usage import claim_budget_refusal
from leases.tokens import new_lease_token
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Task, TaskStatus
from ledger.services import event_append, lock_task

RENEW_ATTEMPTS = 3
# Claim-next re-verifies each locked candidate; this bounds the walk.
CLAIM_NEXT_MAX_CANDIDATES = 64


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

    @property
    def renew_every_seconds(self) -> int:
        return max(1, self.attempt.lease_seconds // 3)

    @property
    def renew_attempts(self) -> int:
        return RENEW_ATTEMPTS


_EPOCH_BUMP = PreparedUpdate(
    lambda task_id, epoch: (Task.objects.filter(pk=task_id), {"epoch": epoch}),
    samples=({"task_id": SAMPLE_INT[0], "epoch": SAMPLE_INT[1]}, {"task_id": SAMPLE_INT[1], "epoch": SAMPLE_INT[0]}),
)


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
    """Why the task may not be claimed (SPEC §3, §16.1), or None: an archived project, a status
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


def _open_epoch(task: Task) -> int:
    """Bump the task's epoch (every claim a new epoch, SPEC §3); claims never bump the version."""
    epoch = task.epoch + 1
    _EPOCH_BUMP.run(task_id=task.pk, epoch=epoch)
    task.epoch = epoch
    return epoch


def _insert_attempt(
    state: ClaimState,
    *,
    agent: Agent,
    now: datetime,
    request: ClaimRequest,
    inherited: Inheritance | None,
    environment: EnvironmentChoice | None,
    review: bool,
) -> tuple[Attempt, str]:
    """Insert the new epoch's active attempt, with its hashed token and label, and return it with its
    token. The partial unique index on active attempts is the last line of defence: hitting it is
    `ClaimCollided` (TASK_TAKEN)."""
    task = state.task
    epoch = task.epoch
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
    try:
        attempt = insert(
            Attempt(
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
        )
    except IntegrityError:
        # Unreachable while claims lock the task row; the index still decides.
        raise ClaimCollided(f"{task.key} was claimed concurrently.", details={"task": task.key}) from None
    return attempt, token


def _append_claimed(attempt: Attempt, *, agent: Agent, now: datetime, review: bool) -> None:
    """The claim's `attempt.claimed` event, in its transaction."""
    event_append(
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
    _open_epoch(task)
    attempt, token = _insert_attempt(
        state,
        agent=agent,
        now=now,
        request=request,
        inherited=inherited,
        environment=environment,
        review=review is not None,
    )
    _append_claimed(attempt, agent=agent, now=now, review=review is not None)
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
    )


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
    _refuse_inactive(agent)
    try:
        granted = _claim(task_id=task.pk, agent=agent, request=request)
    except TaskTaken:
        tally_claim_refusal(project_id=task.project_id, agent=agent)
        raise
    if isinstance(granted, TaskNotClaimable):
        raise granted
    return granted


def _refuse_inactive(agent: Agent) -> None:
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")


def _candidates(*, project: Project, agent: Agent, now: datetime, task_class: str | None = None) -> QuerySet[Task]:
    """Claim-next's candidates in order, each locked as it is read (SKIP LOCKED: agents do not queue)."""
    return (
        claimable_tasks(project=project, now=now, agent=agent, task_class=task_class)
        .select_related("project")
        .select_for_update(skip_locked=True, no_key=True, of=("self",))
    )


def _candidate_values(*, project: Project, agent: Agent, now: datetime, task_class: str | None) -> dict[str, Any]:
    """The values of claim-next's candidate statements (a task class only when one is asked for)."""
    return {"project": project, "agent": agent, "now": now, **({"task_class": task_class} if task_class else {})}


def _candidate_statement(build: Callable[..., QuerySet[Task, Any]], *, by_class: bool) -> Prepared[Task]:
    first, second = (
        _candidate_values(
            project=Project(pk=SAMPLE_INT[index]),
            agent=Agent(pk=SAMPLE_INT[1 - index]),
            now=SAMPLE_TIME[index],
            task_class=f"sample-class-{index}" if by_class else None,
        )
        for index in (0, 1)
    )
    return Prepared(build, samples=(first, second))


# The first candidate, with and without a task class, compiled once (SPEC §20); a walk past a
# candidate builds its query afresh (the excluded list changes the statement).
_FIRST_CANDIDATE = {
    by_class: _candidate_statement(lambda **values: _candidates(**values)[:1], by_class=by_class)
    for by_class in (False, True)
}


# Whether anything is claimable, read without a lock (SQLite, `_nothing_to_claim`).
_ANY_CANDIDATE = {
    by_class: _candidate_statement(
        lambda **values: claimable_tasks(**values).order_by().values_list("pk")[:1], by_class=by_class
    )
    for by_class in (False, True)
}


def _nothing_to_claim(*, project: Project, agent: Agent, task_class: str | None) -> bool:
    """On SQLite, whether a read outside any transaction finds nothing claimable, so claim-next can
    answer "nothing" without taking the database's one write lock (SPEC §20: in a fleet most claims
    find nothing). Only a read that finds nothing decides (the answer is true as of that read);
    one that finds a candidate goes on to the claim, which decides afresh. An agent or project
    whose daily budget is spent is still told so. On PostgreSQL the claim's own first statement
    is as cheap and locks nothing that waits, so this is skipped there.
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return False
    now = clock.now()
    if claim_budget_refusal(task=None, agent=agent, project=project, now=now, scopes=("agent", "project")):
        return False
    values = _candidate_values(project=project, agent=agent, now=now, task_class=task_class)
    return not _ANY_CANDIDATE[bool(task_class)].rows(**values)


@write_transaction
def _claim_next(
    *, project: Project, agent: Agent, task_class: str | None, request: ClaimRequest
) -> LeaseGrant | TaskTaken | None:
    now = clock.now()
    daily = claim_budget_refusal(task=None, agent=agent, project=project, now=now, scopes=("agent", "project"))
    if daily is not None:
        raise daily
    values = _candidate_values(project=project, agent=agent, now=now, task_class=task_class)
    passed_over: list[int] = []
    reserved: list[int] = []
    for _ in range(CLAIM_NEXT_MAX_CANDIDATES):
        # The row comes back locked (SKIP LOCKED) and as locked: its own columns are current.
        if passed_over:
            candidate = _candidates(**values).exclude(pk__in=passed_over).first()
        else:
            candidate = _FIRST_CANDIDATE[bool(task_class)].first(**values)
        if candidate is None:
            break
        # The candidate query's NOT EXISTS saw its statement's snapshot; a claim
        # that committed since is only visible to a new statement. Re-verify.
        try:
            return claim_locked(claim_state(candidate), agent=agent, now=now, request=request, budget_scopes=("task",))
        except ClaimCollided:
            raise  # the transaction is spoiled; the caller sees TASK_TAKEN
        except PathsReserved:
            reserved.append(candidate.pk)
            passed_over.append(candidate.pk)
        except (TaskTaken, TaskNotClaimable):
            passed_over.append(candidate.pk)
    if passed_over and len(reserved) < len(passed_over):
        # Returned, not raised: a candidate quarantined on the way (SPEC §16.4) stays quarantined.
        return TaskTaken(
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
    paths: Sequence[str] | None = None,
    paths_mode: str | None = None,
) -> LeaseGrant | None:
    """Claim the project's next claimable task (priority, then age); None when there is none.

    On PostgreSQL candidates are taken with FOR NO KEY UPDATE SKIP LOCKED, so
    agents do not queue on one row; on SQLite the IMMEDIATE transaction
    serializes. Environment refusals are not "taken": they end the call.
    Candidates whose paths are reserved by another live attempt are walked
    past; when they were all that was left the answer is None (SPEC §19). An
    agent or project whose budget for the day is spent gets TASK_NOT_CLAIMABLE
    (reason `budget`); a task whose own budget is spent is not a candidate.
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
    _refuse_inactive(agent)
    if _nothing_to_claim(project=project, agent=agent, task_class=task_class):
        return None
    try:
        granted = _claim_next(project=project, agent=agent, task_class=task_class, request=request)
        if isinstance(granted, TaskTaken):
            raise granted
    except TaskTaken:
        tally_claim_refusal(project_id=project.pk, agent=agent)
        raise
    return granted
