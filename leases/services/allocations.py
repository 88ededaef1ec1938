"""Allocations: leases on environments, taken inside claims (SPEC §6).

The partial unique index (one non-released allocation per environment) is
the arbiter between concurrent claims: each insert runs in a savepoint, and
losing it means `ENVIRONMENT_UNAVAILABLE` (by name) or the next candidate
(by kind).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet

from core.db import write_transaction
from core.errors import EnvironmentUnavailable, NotFound, ValidationFailed
from environments.models import Environment, EnvironmentStatus
from leases.models import Allocation, AllocationStatus, Attempt
from leases.selectors import releasable
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Isolation, Severity, Task
from ledger.services import event_append

# Bounds the walk over a pool when concurrent claims take candidates first.
POOL_CANDIDATES = 16


def live_allocations() -> QuerySet[Allocation]:
    return Allocation.objects.exclude(status=AllocationStatus.RELEASED)


def _allowed_isolations(task: Task) -> list[str]:
    required = Isolation.rank(task.project.required_isolation)
    return [value for value in Isolation.values if Isolation.rank(value) >= required]


@dataclass(frozen=True)
class EnvironmentChoice:
    environment: Environment
    inherits: Allocation | None = None


def _has_live_allocation(environment: Environment) -> bool:
    return live_allocations().filter(environment=environment).exists()


def choose_environment(
    *, task: Task, environment: str | None, environment_kind: str | None, stale_allocation_id: int | None
) -> EnvironmentChoice | None:
    """Pick (and lock) the environment a claim will allocate, before the attempt exists.

    Its row is locked, so concurrent claims of one environment queue on it and
    the second one sees the first one's allocation; by kind, busy candidates
    are skipped (SKIP LOCKED). A stale allocation this task's dead attempt left
    behind is inherited when it matches the request, or when nothing was
    requested: the new holder resumes where the old one worked. The claim's
    lock statement found `stale_allocation_id` already.
    """
    wanted_any = environment is None and environment_kind is None
    stale = (
        Allocation.objects.select_related("environment").filter(pk=stale_allocation_id).first()
        if stale_allocation_id is not None
        else None
    )
    if stale is not None and (
        wanted_any or stale.environment.name == environment or stale.environment.kind == environment_kind
    ):
        Environment.objects.select_for_update(no_key=True).filter(pk=stale.environment_id).first()
        return EnvironmentChoice(environment=stale.environment, inherits=stale)
    if wanted_any:
        return None

    allowed = _allowed_isolations(task)
    if environment is not None:
        target = (
            Environment.objects.select_for_update(no_key=True).filter(project=task.project, name=environment).first()
        )
        if target is None:
            raise NotFound(
                f"No environment {environment!r} in {task.project.slug}.", details={"environment": environment}
            )
        reason = None
        if target.status != EnvironmentStatus.AVAILABLE:
            reason = target.status
        elif target.isolation not in allowed:
            reason = "insufficient_isolation"
        elif _has_live_allocation(target):
            reason = "taken"
        if reason is not None:
            raise EnvironmentUnavailable(
                f"{environment} cannot be allocated ({reason.replace('_', ' ')}).",
                details={"environment": environment, "reason": reason},
            )
        return EnvironmentChoice(environment=target)

    pool = (
        Environment.objects.filter(
            project=task.project, kind=environment_kind, status=EnvironmentStatus.AVAILABLE, isolation__in=allowed
        )
        .exclude(Exists(live_allocations().filter(environment=OuterRef("pk"))))
        .order_by("name")
    )
    passed_over: list[int] = []
    for _ in range(POOL_CANDIDATES):
        candidate = pool.exclude(pk__in=passed_over).select_for_update(skip_locked=True, no_key=True).first()
        if candidate is None:
            break
        if not _has_live_allocation(candidate):  # a fresh statement sees allocations committed meanwhile
            return EnvironmentChoice(environment=candidate)
        passed_over.append(candidate.pk)
    raise EnvironmentUnavailable(
        f"No {environment_kind} environment of {task.project.slug} is free.",
        details={"environment_kind": environment_kind, "reason": "pool_exhausted"},
    )


def bind_allocation(choice: EnvironmentChoice, *, attempt: Attempt, now: datetime) -> Allocation:
    """Insert the allocation chosen for this claim and record it."""
    if choice.inherits is not None:
        Allocation.objects.filter(pk=choice.inherits.pk).update(status=AllocationStatus.RELEASED, released_at=now)
    try:
        with transaction.atomic():
            allocation = Allocation.objects.create(environment=choice.environment, attempt=attempt, allocated_at=now)
    except IntegrityError:
        # Unreachable while claims lock the environment row; the index still decides.
        raise EnvironmentUnavailable(
            f"{choice.environment.name} was allocated concurrently.",
            details={"environment": choice.environment.name, "reason": "taken"},
        ) from None
    event_append(
        type=EventType.ENVIRONMENT_ALLOCATED,
        actor=Actor(agent=attempt.agent),
        at=now,
        task=attempt.task,
        attempt_id=attempt.pk,
        payload={
            "environment": choice.environment.name,
            "inherited_from_attempt": choice.inherits.attempt_id if choice.inherits else None,
        },
    )
    return allocation


def release_allocations(attempt: Attempt, *, now: datetime, actor: Actor) -> int:
    """The attempt ended cleanly (finish, release): its environments are free again."""
    released = Allocation.objects.filter(attempt=attempt, status=AllocationStatus.ACTIVE).update(
        status=AllocationStatus.RELEASED, released_at=now
    )
    if released:
        names = Allocation.objects.filter(attempt=attempt, released_at=now).values_list("environment__name", flat=True)
        for name in names:
            event_append(
                type=EventType.ENVIRONMENT_RELEASED,
                actor=actor,
                at=now,
                task=attempt.task,
                attempt_id=attempt.pk,
                payload={"environment": name},
            )
    return released


def mark_allocations_stale(attempt_ids: Sequence[int]) -> int:
    """The attempts died (expiry, revocation): keep their environments aside, never free them."""
    return Allocation.objects.filter(attempt_id__in=attempt_ids, status=AllocationStatus.ACTIVE).update(
        status=AllocationStatus.STALE
    )


@write_transaction
def allocation_release(*, allocation: Allocation, actor: Actor) -> Allocation:
    """An admin frees a stale (or leaked) allocation after checking the environment.

    Released already: nothing to do. Otherwise `leases.selectors.releasable`
    decides; a live attempt's allocation is refused.
    """
    now = clock.now()
    locked = (
        Allocation.objects.select_for_update(no_key=True)
        .select_related("environment", "attempt__task")
        .get(pk=allocation.pk)
    )
    if locked.status == AllocationStatus.RELEASED:
        return locked
    if not releasable(locked):
        raise ValidationFailed("This allocation belongs to a live attempt; revoke the attempt first.")
    Allocation.objects.filter(pk=locked.pk).update(status=AllocationStatus.RELEASED, released_at=now)
    locked.status, locked.released_at = AllocationStatus.RELEASED, now
    event_append(
        type=EventType.ENVIRONMENT_RELEASED,
        severity=Severity.INFO,
        actor=actor,
        at=now,
        task=locked.attempt.task,
        attempt_id=locked.attempt_id,
        payload={"environment": locked.environment.name, "by_admin": True},
    )
    return locked


def active_allocation_of(attempt: Attempt) -> Allocation | None:
    return (
        Allocation.objects.select_related("environment")
        .filter(attempt=attempt, status=AllocationStatus.ACTIVE)
        .order_by("-id")
        .first()
    )
