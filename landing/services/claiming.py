"""Claiming the next landing of a (project, target) (SPEC §21.2, §21.3).

One statement decides who lands: the insert of an active `Landing` under the partial unique index
`landing_one_live_per_target`. A lander that loses that race (or finds a live landing) gets nothing
(204), never a second landing. The winner takes up to `batch_max` delivered tasks in queue order —
priority, then delivery time — locked with SKIP LOCKED, and gives each an attempt of kind `land`
on a new epoch of the task, all under the landing's lease and token. A lapsed live landing is
expired first, lazily, as claims expire lapsed attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Exists, Max, OuterRef, QuerySet

from core.db import write_transaction
from core.errors import PermissionDenied, ValidationFailed
from core.prepared import insert
from landing.gates import gated
from landing.models import Landing, LandingStatus, LandingTask
from landing.services.lapsing import expire_landing
from leases.labels import Label, render_label
from leases.models import Attempt, AttemptKind, AttemptStatus
from leases.selectors import clamp_lease_seconds, live_attempts
from leases.services import expire_lapsed
from leases.tokens import new_lease_token
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, LandMethod, Project, Task, TaskStatus
from ledger.services import event_append


@dataclass(frozen=True)
class LandingGrant:
    """What a landing claim returns: the landing, its tasks' entries (queue order) and the token, shown once."""

    landing: Landing
    entries: list[LandingTask]
    token: str

    @property
    def renew_every_seconds(self) -> int:
        return max(1, self.landing.lease_seconds // 3)

    @property
    def first_attempt_id(self) -> int:
        return self.entries[0].attempt_id


def delivered_queue(project: Project, *, now: datetime) -> QuerySet[Task]:
    """Delivered tasks of the project not being landed, in queue order (index `task_landing_queue`),
    landable or not."""
    return (
        Task.objects.filter(project=project, status=TaskStatus.DELIVERED)
        .exclude(Exists(live_attempts(now).filter(task=OuterRef("pk"))))
        .order_by("-priority", "delivered_at", "id")
    )


def landing_queue(project: Project, *, now: datetime) -> QuerySet[Task]:
    """The delivered tasks a lander may take, in queue order: those the gates let through (SPEC §22)."""
    return gated(delivered_queue(project, now=now), project)


def refuse_unless_landing(project: Project) -> None:
    if not project.landing_on:
        raise ValidationFailed(
            f"Project {project.slug} has landing off: set a target branch first (manage.py set_landing).",
            details={"project": project.slug, "reason": "landing_off"},
        )
    if project.land_method == LandMethod.NONE:
        raise ValidationFailed(
            f"Project {project.slug} lands with method none: its work is merged elsewhere (a forge), "
            "and reconciliation marks it landed. There is nothing for a lander to do.",
            details={"project": project.slug, "reason": "land_method_none"},
        )


def _open_task_attempt(
    task: Task, *, landing: Landing, agent: Agent, token_hash: str, salt: str, now: datetime
) -> Attempt:
    epoch = task.epoch + 1
    Task.objects.filter(pk=task.pk).update(epoch=epoch)
    task.epoch = epoch
    label = render_label(Label(owner=agent.handle, branch=task.delivered_branch, env=None, task=task.key, epoch=epoch))
    return insert(
        Attempt(
            task=task,
            agent=agent,
            epoch=epoch,
            status=AttemptStatus.ACTIVE,
            kind=AttemptKind.LAND,
            token_hash=token_hash,
            token_salt=salt,
            lease_seconds=landing.lease_seconds,
            lease_expires_at=landing.lease_expires_at,
            claimed_at=now,
            branch=task.delivered_branch,
            base_commit="",
            head_commit=task.delivered_commit,
            label=label,
            task_version_at_claim=task.version,
        )
    )


@write_transaction
def _claim_next(*, project: Project, agent: Agent, lease_seconds: int) -> LandingGrant | None:
    now = clock.now()
    target = project.target_branch
    live = (
        Landing.objects.select_for_update(of=("self",))
        .filter(project=project, target_branch=target, status=LandingStatus.ACTIVE)
        .first()
    )
    if live is not None:
        if live.lease_expires_at > now:
            return None
        expire_landing(live, now=now)
    candidates = list(
        landing_queue(project, now=now).select_for_update(skip_locked=True, of=("self",))[: project.batch_max]
    )
    if not candidates:
        return None
    # A lapsed attempt of another kind cannot hold a delivered task; expire it if one does.
    lapsed = list(Attempt.objects.filter(task__in=candidates, status=AttemptStatus.ACTIVE).values_list("id", flat=True))
    if lapsed:
        expire_lapsed(lapsed, now=now)
    epoch = (
        Landing.objects.filter(project=project, target_branch=target).aggregate(last=Max("epoch"))["last"] or 0
    ) + 1
    first = candidates[0]
    token, salt, token_hash = new_lease_token(task_id=first.pk, epoch=first.epoch + 1)
    try:
        with transaction.atomic():
            landing = insert(
                Landing(
                    project=project,
                    target_branch=target,
                    epoch=epoch,
                    agent=agent,
                    status=LandingStatus.ACTIVE,
                    method=project.land_method,
                    check_command=project.check_command,
                    check_timeout_seconds=project.check_timeout_seconds,
                    token_hash=token_hash,
                    token_salt=salt,
                    lease_seconds=lease_seconds,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    claimed_at=now,
                )
            )
    except IntegrityError:
        return None  # another lander's landing of this target won the index: the queue is theirs
    entries: list[LandingTask] = []
    for position, task in enumerate(candidates):
        attempt = _open_task_attempt(task, landing=landing, agent=agent, token_hash=token_hash, salt=salt, now=now)
        entries.append(
            insert(
                LandingTask(
                    landing=landing,
                    task=task,
                    attempt=attempt,
                    position=position,
                    branch=task.delivered_branch,
                    head_commit=task.delivered_commit,
                )
            )
        )
        event_append(
            type=EventType.LANDING_CLAIMED,
            actor=Actor(agent=agent),
            at=now,
            task=task,
            attempt_id=attempt.pk,
            payload={
                "landing": landing.pk,
                "epoch": landing.epoch,
                "agent": agent.handle,
                "target_branch": target,
                "batch": len(candidates),
                "position": position,
                "head_commit": task.delivered_commit,
            },
        )
    return LandingGrant(landing=landing, entries=entries, token=token)


def landing_claim_next(*, project: Project, agent: Agent, lease_seconds: int | None = None) -> LandingGrant | None:
    """Claim the next landing of the project's target: up to `batch_max` delivered tasks; None when the
    queue is empty or another live landing holds the target."""
    refuse_unless_landing(project)
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")
    seconds = clamp_lease_seconds(lease_seconds if lease_seconds is not None else project.default_lease_seconds)
    return _claim_next(project=project, agent=agent, lease_seconds=seconds)
