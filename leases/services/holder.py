"""What the holder of a lease does with it: renew, write notes, set git facts, finish, release.

Every holder call presents a `HolderProof` (attempt id, token, epoch) and is
fenced (SPEC §3): wrong token → `INVALID_LEASE_TOKEN`; an epoch older than the
task's → `STALE_EPOCH`; an attempt no longer active → `LEASE_NOT_HELD` (or
`LEASE_EXPIRED` when it expired); a lapsed lease is expired in the same
transaction, which commits, and the call answers `LEASE_EXPIRED`. Holder
writes are heartbeats: each extends the lease, never shortening it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db.models import F

from config.db import write_transaction
from config.errors import (
    AcknowledgementRequired,
    InvalidLeaseToken,
    LeaseExpired,
    LeaseNotHeld,
    LedgerError,
    NotFound,
    StaleEpoch,
    ValidationFailed,
)
from leases.branches import validate_branch_name
from leases.labels import parse_label, render_label
from leases.models import (
    NEXT_STEP_MAX_CHARS,
    NEXT_STEPS_MAX_ITEMS,
    NOTE_MAX_CHARS,
    Attempt,
    AttemptStatus,
    FailureReason,
    InterruptionReason,
    Note,
    NoteKind,
)
from leases.selectors import clamp_lease_seconds
from leases.services.allocations import release_allocations
from leases.services.claims import validate_base_commit
from leases.services.ending import end_attempt, task_claimable_again
from leases.services.expiry import expire_lapsed
from leases.tokens import lease_token_matches
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, Event, EventType, Task, TaskStatus
from ledger.services import ACKNOWLEDGED_FIELDS, apply_task_update, event_append, lock_task

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class HolderProof:
    """What a holder call presents: its attempt, the lease token, the epoch; and who calls."""

    attempt_id: int
    token: str
    epoch: int
    agent: Agent


class Outcome:
    DONE = "done"
    REVIEW = "review"
    FAILED = "failed"
    HANDOFF = "handoff"
    ALL = (DONE, REVIEW, FAILED, HANDOFF)


def refusals_after_commit(func: Callable[P, R | LedgerError]) -> Callable[P, R]:
    """Run a holder transaction; a refusal it *returns* is raised after its writes commit.

    Lets a call that found a lapsed lease expire the attempt (and keep that)
    while still answering `LEASE_EXPIRED`.
    """
    transactional = write_transaction(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        result = transactional(*args, **kwargs)
        if isinstance(result, LedgerError):
            raise result
        return result

    return wrapper


# What renew and note read: the fencing, the lease, and the task and project their event names.
_LEASE_FIELDS = (
    "id",
    "task",
    "agent",
    "epoch",
    "status",
    "token_hash",
    "lease_seconds",
    "lease_expires_at",
    "last_renewed_at",
    "renew_count",
    "task__key",
    "task__epoch",
    "task__project__id",
)


def _held(proof: HolderProof, *, now: datetime, lock_task: bool, lean: bool = False) -> Attempt | LeaseExpired:
    """The proof's attempt, locked, if it holds a live lease; else a refusal.

    The agent is not read: the attempt is looked up by the proof's agent, so
    it is that one. `lean` (renew, note) reads only `_LEASE_FIELDS`; any other
    field loads on first access. Otherwise the attempt, its task and project
    come whole, for the calls that end the attempt or write the task.
    """
    lock_of = ("self", "task") if lock_task else ("self",)
    attempts = (
        Attempt.objects.select_for_update(no_key=True, of=lock_of)
        .select_related("task__project")
        .filter(pk=proof.attempt_id, agent=proof.agent)
    )
    attempt = (attempts.only(*_LEASE_FIELDS) if lean else attempts).first()
    if attempt is None:
        raise NotFound(f"No attempt {proof.attempt_id} of yours.", details={"attempt": proof.attempt_id})
    attempt.agent = proof.agent
    if not lease_token_matches(proof.token, attempt.token_hash):
        raise InvalidLeaseToken(details={"attempt": attempt.pk})
    if attempt.status == AttemptStatus.REVOKED:
        # SPEC §3: "The revoked holder's next write fails with LEASE_NOT_HELD",
        # even when the task was claimed again since: a person stopped it.
        raise LeaseNotHeld(
            f"Attempt {attempt.pk} was revoked: stop working on it.",
            details={"attempt": attempt.pk, "status": attempt.status},
        )
    task_epoch = attempt.task.epoch
    if proof.epoch < task_epoch or (attempt.status != AttemptStatus.ACTIVE and task_epoch > attempt.epoch):
        raise StaleEpoch(
            f"{attempt.task.key} is at epoch {task_epoch}; this write carries epoch {proof.epoch}.",
            details={"attempt": attempt.pk, "presented_epoch": proof.epoch, "current_epoch": task_epoch},
        )
    if proof.epoch != attempt.epoch:
        raise ValidationFailed(
            f"Attempt {attempt.pk} has epoch {attempt.epoch}, not {proof.epoch}.",
            details={"attempt": attempt.pk, "epoch": attempt.epoch},
        )
    if attempt.status == AttemptStatus.EXPIRED:
        raise LeaseExpired(details={"attempt": attempt.pk, "status": attempt.status})
    if attempt.status != AttemptStatus.ACTIVE:
        raise LeaseNotHeld(
            f"Attempt {attempt.pk} is {attempt.status}.", details={"attempt": attempt.pk, "status": attempt.status}
        )
    if attempt.lease_expires_at <= now:
        expire_lapsed([attempt.pk], now=now)
        return LeaseExpired(
            f"The lease of attempt {attempt.pk} lapsed at {attempt.lease_expires_at.isoformat()}.",
            details={"attempt": attempt.pk, "status": AttemptStatus.EXPIRED},
        )
    return attempt


def _extend(attempt: Attempt, *, now: datetime, seconds: int, renewal: bool) -> datetime:
    """Push the lease to at least now + seconds; never shorter (the attempt is locked)."""
    expires = max(attempt.lease_expires_at, now + timedelta(seconds=seconds))
    Attempt.objects.filter(pk=attempt.pk).update(
        lease_expires_at=expires,
        last_renewed_at=now,
        renew_count=F("renew_count") + (1 if renewal else 0),
    )
    attempt.lease_expires_at = expires
    attempt.last_renewed_at = now
    if renewal:
        attempt.renew_count += 1
    return expires


@refusals_after_commit
def attempt_renew(*, proof: HolderProof, lease_seconds: int | None = None) -> Attempt | LedgerError:
    """Heartbeat: extend the lease by `lease_seconds` (clamped) or the attempt's own length."""
    if lease_seconds is not None and (not isinstance(lease_seconds, int) or lease_seconds <= 0):
        raise ValidationFailed("lease_seconds must be a positive integer.")
    now = clock.now()
    held = _held(proof, now=now, lock_task=False, lean=True)
    if isinstance(held, LedgerError):
        return held
    seconds = clamp_lease_seconds(lease_seconds) if lease_seconds is not None else held.lease_seconds
    _extend(held, now=now, seconds=seconds, renewal=True)
    return held


def _validate_next_steps(next_steps: Any) -> list[str]:
    if not isinstance(next_steps, list | tuple) or not all(isinstance(step, str) for step in next_steps):
        raise ValidationFailed("next_steps must be a list of strings.")
    if len(next_steps) > NEXT_STEPS_MAX_ITEMS:
        raise ValidationFailed(
            f"next_steps holds at most {NEXT_STEPS_MAX_ITEMS} items; got {len(next_steps)}.",
            details={"fields": {"next_steps": [f"at most {NEXT_STEPS_MAX_ITEMS} items"]}},
        )
    too_long = [index for index, step in enumerate(next_steps) if len(step) > NEXT_STEP_MAX_CHARS]
    if too_long:
        raise ValidationFailed(
            f"Each next step is at most {NEXT_STEP_MAX_CHARS} characters; items {too_long} are longer.",
            details={"fields": {"next_steps": [f"at most {NEXT_STEP_MAX_CHARS} characters each"]}},
        )
    return list(next_steps)


@dataclass(frozen=True)
class NoteWritten:
    note: Note
    lease_expires_at: datetime


@refusals_after_commit
def note_add(
    *,
    proof: HolderProof,
    kind: str,
    content: str,
    next_steps: Sequence[str] = (),
    important: bool = False,
) -> NoteWritten | LedgerError:
    """Add a progress, finding, warning or checkpoint note; renews the lease."""
    if kind not in NoteKind.values:
        raise ValidationFailed(f"kind must be one of {', '.join(NoteKind.values)}.")
    if not isinstance(content, str) or not content.strip():
        raise ValidationFailed("content must be a non-empty string.")
    if len(content) > NOTE_MAX_CHARS:
        raise ValidationFailed(
            f"content is {len(content)} characters; a note holds at most {NOTE_MAX_CHARS}.",
            details={"fields": {"content": [f"at most {NOTE_MAX_CHARS} characters"]}, "length": len(content)},
        )
    steps = _validate_next_steps(next_steps)
    now = clock.now()
    held = _held(proof, now=now, lock_task=False, lean=True)
    if isinstance(held, LedgerError):
        return held
    expires = _extend(held, now=now, seconds=held.lease_seconds, renewal=False)
    note = Note.objects.create(
        attempt=held, kind=kind, content=content, next_steps=steps, important=bool(important), created_at=now
    )
    event_append(
        type=EventType.NOTE_ADDED,
        actor=Actor(agent=held.agent),
        at=now,
        task=held.task,
        attempt_id=held.pk,
        payload={"note": note.pk, "kind": kind, "important": note.important, "checkpoint": kind == NoteKind.CHECKPOINT},
    )
    return NoteWritten(note=note, lease_expires_at=expires)


@refusals_after_commit
def attempt_set_git(
    *, proof: HolderProof, branch: str | None = None, base_commit: str | None = None
) -> Attempt | LedgerError:
    """Record the attempt's branch and/or base commit; rewrites the label; renews the lease."""
    if branch is None and base_commit is None:
        raise ValidationFailed("Give a branch, a base_commit, or both.")
    if branch is not None:
        validate_branch_name(branch)
    if base_commit is not None:
        validate_base_commit(base_commit)
    now = clock.now()
    held = _held(proof, now=now, lock_task=False)
    if isinstance(held, LedgerError):
        return held
    _extend(held, now=now, seconds=held.lease_seconds, renewal=False)
    changed: dict[str, str] = {}
    if branch is not None and branch != held.branch:
        changed["branch"] = branch
        changed["label"] = render_label(dataclasses.replace(parse_label(held.label), branch=branch))
    if base_commit is not None and base_commit != held.base_commit:
        changed["base_commit"] = base_commit
    if changed:
        Attempt.objects.filter(pk=held.pk).update(**changed)
        for name, value in changed.items():
            setattr(held, name, value)
        event_append(
            type=EventType.ATTEMPT_UPDATED,
            actor=Actor(agent=held.agent),
            at=now,
            task=held.task,
            attempt_id=held.pk,
            payload={name: value for name, value in changed.items() if name != "label"},
        )
    return held


def _acknowledgement_needed(attempt: Attempt, task: Task) -> list[str]:
    """Which of description, acceptance criteria, status changed since the claim."""
    if task.version == attempt.task_version_at_claim:
        return []
    changed: set[str] = set()
    events = Event.objects.filter(
        task=task, type__in=("task.updated", "task.status_changed"), id__gt=attempt.event_id_at_claim or 0
    ).values_list("type", "payload")
    for event_type, payload in events:
        if event_type == "task.status_changed":
            changed.add("status")
        else:
            changed.update(set(payload.get("fields", ())) & ACKNOWLEDGED_FIELDS)
    return sorted(changed)


def _validate_finish(
    outcome: str, failure_reason_code: str | None, interruption_reason_code: str | None
) -> tuple[str, str]:
    if outcome not in Outcome.ALL:
        raise ValidationFailed(f"outcome must be one of {', '.join(Outcome.ALL)}.")
    failure = failure_reason_code or ""
    interruption = interruption_reason_code or ""
    if outcome == Outcome.FAILED and failure not in FailureReason.values:
        raise ValidationFailed(
            f"A failed outcome needs failure_reason_code, one of {', '.join(FailureReason.values)}.",
            details={"fields": {"failure_reason_code": ["required for failed"]}},
        )
    if outcome != Outcome.FAILED and failure:
        raise ValidationFailed("failure_reason_code is only for the failed outcome.")
    if outcome == Outcome.HANDOFF and interruption not in InterruptionReason.values:
        raise ValidationFailed(
            f"A handoff needs interruption_reason_code, one of {', '.join(InterruptionReason.values)}.",
            details={"fields": {"interruption_reason_code": ["required for handoff"]}},
        )
    if outcome != Outcome.HANDOFF and interruption:
        raise ValidationFailed("interruption_reason_code is only for the handoff outcome.")
    return failure, interruption


def _claimed_an_environment(attempt: Attempt) -> bool:
    """Whether the attempt may hold an allocation to release, known without a query.

    Only the claim allocates, and it names the environment in the label it
    writes (SPEC §5, §6); later label rewrites keep that field. A label that
    does not parse (not written by this server) is taken to hold one.
    """
    try:
        return parse_label(attempt.label).env is not None
    except ValidationFailed:
        return True


@dataclass(frozen=True)
class Finished:
    attempt: Attempt
    task: Task


@refusals_after_commit
def attempt_finish(
    *,
    proof: HolderProof,
    outcome: str,
    result_summary: str = "",
    next_steps: Sequence[str] = (),
    failure_reason_code: str | None = None,
    interruption_reason_code: str | None = None,
    acknowledged_version: int | None = None,
) -> Finished | LedgerError:
    """End the attempt with an outcome (SPEC §3).

    done → completed, task done; review → completed, task review; failed →
    failed, task stays ready; handoff → interrupted, task stays ready. If the
    task's description, acceptance criteria or status changed since the
    claim, `acknowledged_version` must equal the current version.
    """
    failure, interruption = _validate_finish(outcome, failure_reason_code, interruption_reason_code)
    steps = _validate_next_steps(next_steps)
    if not isinstance(result_summary, str):
        raise ValidationFailed("result_summary must be a string.")
    now = clock.now()
    held = _held(proof, now=now, lock_task=True)
    if isinstance(held, LedgerError):
        return held
    task = held.task
    changed = _acknowledgement_needed(held, task)
    if changed and acknowledged_version != task.version:
        raise AcknowledgementRequired(
            f"{task.key} changed since your claim ({', '.join(changed)}); re-read it and finish with "
            f"acknowledged_version={task.version}.",
            details={"current_version": task.version, "changed": changed},
        )
    status = {
        Outcome.DONE: AttemptStatus.COMPLETED,
        Outcome.REVIEW: AttemptStatus.COMPLETED,
        Outcome.FAILED: AttemptStatus.FAILED,
        Outcome.HANDOFF: AttemptStatus.INTERRUPTED,
    }[outcome]
    actor = Actor(agent=held.agent)
    if _claimed_an_environment(held):
        release_allocations(held, now=now, actor=actor)
    end_attempt(
        held,
        now=now,
        status=status,
        result_summary=result_summary,
        next_steps=steps,
        failure_reason_code=failure,
        interruption_reason_code=interruption,
    )
    if outcome in (Outcome.DONE, Outcome.REVIEW):
        target = TaskStatus.DONE if outcome == Outcome.DONE else TaskStatus.REVIEW
        task, _ = apply_task_update(locked=task, actor=actor, changes={"status": target}, now=now)
    else:
        task = task_claimable_again(task, now=now)
    event_append(
        type=EventType.ATTEMPT_FINISHED,
        actor=actor,
        at=now,
        task=task,
        attempt_id=held.pk,
        payload={
            "outcome": outcome,
            "status": status,
            "failure_reason_code": failure or None,
            "interruption_reason_code": interruption or None,
        },
    )
    return Finished(attempt=held, task=task)


@refusals_after_commit
def attempt_release(*, proof: HolderProof, reason: str = "") -> Finished | LedgerError:
    """Give the task back untouched: the attempt is released, the task stays as it is."""
    now = clock.now()
    held = _held(proof, now=now, lock_task=True)
    if isinstance(held, LedgerError):
        return held
    if _claimed_an_environment(held):
        release_allocations(held, now=now, actor=Actor(agent=held.agent))
    end_attempt(held, now=now, status=AttemptStatus.RELEASED)
    task = task_claimable_again(held.task, now=now)
    event_append(
        type=EventType.ATTEMPT_RELEASED,
        actor=Actor(agent=held.agent),
        at=now,
        task=task,
        attempt_id=held.pk,
        payload={"reason": reason[:500]} if reason else {},
    )
    return Finished(attempt=held, task=task)


@dataclass(frozen=True)
class TaskUpdated:
    task: Task
    changed: frozenset[str]
    lease_expires_at: datetime | None


@refusals_after_commit
def task_update(
    *,
    task: Task,
    actor: Actor,
    changes: dict[str, Any],
    expected_version: int | None = None,
    proof: HolderProof | None = None,
) -> TaskUpdated | LedgerError:
    """Update a task, knowing about its lease (SPEC §3).

    With a proof, the holder's write renews its lease. Without one, a status
    change while someone else's lease is live goes through and appends exactly
    one `task.contested` warn event naming actor, holder and both statuses;
    the holder's lease is untouched.
    """
    now = clock.now()
    if proof is not None:
        held = _held(proof, now=now, lock_task=True)
        if isinstance(held, LedgerError):
            return held
        if held.task_id != task.pk:
            raise LeaseNotHeld(f"Attempt {held.pk} does not hold {task.key}.", details={"attempt": held.pk})
        expires = _extend(held, now=now, seconds=held.lease_seconds, renewal=False)
        updated, changed = apply_task_update(
            locked=held.task, actor=actor, changes=changes, expected_version=expected_version, now=now
        )
        return TaskUpdated(task=updated, changed=changed, lease_expires_at=expires)

    locked = lock_task(task.pk)
    old_status = locked.status
    live = (
        Attempt.objects.filter(task=task, status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
        .select_related("agent")
        .first()
    )
    updated, changed = apply_task_update(
        locked=locked, actor=actor, changes=changes, expected_version=expected_version, now=now
    )
    if live is not None and "status" in changed and actor.agent != live.agent:
        event_append(
            type=EventType.TASK_CONTESTED,
            severity="warn",
            actor=actor,
            at=now,
            task=updated,
            attempt_id=live.pk,
            payload={
                "actor": actor.label,
                "holder": live.agent.handle,
                "from": old_status,
                "to": updated.status,
                "lease_expires_at": live.lease_expires_at.isoformat(),
            },
        )
    return TaskUpdated(task=updated, changed=changed, lease_expires_at=None)
