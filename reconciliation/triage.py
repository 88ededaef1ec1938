"""What an admin does with reconciliation's output: acknowledge or resolve findings, discard an attempt's work.

Each is one transaction that appends its event. None deletes anything: a
finding resolved by hand while its condition still holds is opened again,
as a new finding, by the next run; discarding an attempt only lets the next
run call its clean worktree removable.
"""

from __future__ import annotations

from datetime import datetime

from core.db import write_transaction
from core.errors import ValidationFailed
from leases.models import Attempt, AttemptStatus
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Severity
from ledger.services import event_append
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, AttemptDiscard, Finding, FindingStatus

# `resolved_by` of a finding whose condition stopped holding.
RECONCILIATION_ACTOR = "reconciliation"
NOTE_MAX_CHARS = 2000


def _clean_text(text: str, *, name: str, required: bool) -> str:
    text = (text or "").strip()
    if required and not text:
        raise ValidationFailed(f"A {name} is required.", details={"fields": {name: ["required"]}})
    if len(text) > NOTE_MAX_CHARS:
        raise ValidationFailed(f"The {name} is at most {NOTE_MAX_CHARS} characters.")
    return text


def finding_payload(finding: Finding, **extra: object) -> dict[str, object]:
    """A finding event's payload (`finding.opened`, `.resolved`, `.triaged`): one shape for all of them."""
    return {
        "finding": finding.pk,
        "condition": finding.condition,
        "subject_type": finding.subject_type,
        "subject": finding.subject_key[:200],
        **extra,
    }


def resolve_finding_locked(finding: Finding, *, actor: Actor, by: str, now: datetime, note: str = "") -> int:
    """Resolve an unresolved finding by compare-and-set; 1 if this call resolved it, else 0.

    Call inside a transaction. Two resolvers at once resolve it once and
    append one `finding.resolved`.
    """
    changed = Finding.objects.filter(pk=finding.pk, status__in=UNRESOLVED_FINDING_STATUSES).update(
        status=FindingStatus.RESOLVED, resolved_at=now, resolved_by=by, resolution_note=note
    )
    if changed:
        event_append(
            type=EventType.FINDING_RESOLVED,
            severity=Severity.INFO,
            actor=actor,
            at=now,
            project=finding.project,
            task=finding.task,
            attempt_id=finding.attempt_id,
            payload=finding_payload(finding, by=by, note=note[:200]),
        )
    return changed


OWNER_MAX_CHARS = 200


@write_transaction
def finding_acknowledge(*, finding: Finding, actor: Actor, note: str = "", owner: str = "") -> Finding:
    """Someone is on it: the finding stays until its condition stops holding, then resolves on its own.

    `owner` names who is on it (default: the acknowledging actor); `note` says what they do.
    """
    note = _clean_text(note, name="note", required=False)
    owner = (owner or "").strip() or actor.label
    if len(owner) > OWNER_MAX_CHARS:
        raise ValidationFailed(
            f"The owner is at most {OWNER_MAX_CHARS} characters.", details={"fields": {"owner": ["too long"]}}
        )
    now = clock.now()
    changed = Finding.objects.filter(pk=finding.pk, status=FindingStatus.OPEN).update(
        status=FindingStatus.ACKNOWLEDGED,
        acknowledged_at=now,
        acknowledged_by=actor.label,
        owner=owner,
        resolution_note=note,
    )
    finding.refresh_from_db()
    if changed:
        event_append(
            type=EventType.FINDING_ACKNOWLEDGED,
            actor=actor,
            at=now,
            project=finding.project,
            task=finding.task,
            attempt_id=finding.attempt_id,
            payload=finding_payload(finding, note=note[:200], owner=owner),
        )
    elif finding.status == FindingStatus.RESOLVED:
        raise ValidationFailed("This finding is already resolved.", details={"finding": finding.pk})
    return finding


@write_transaction
def finding_resolve(*, finding: Finding, actor: Actor, note: str = "") -> Finding:
    """Close a finding by hand. If its condition still holds, the next run opens a new one."""
    note = _clean_text(note, name="note", required=False)
    resolve_finding_locked(finding, actor=actor, by=actor.label, now=clock.now(), note=note)
    finding.refresh_from_db()
    return finding


@write_transaction
def attempt_discard(*, attempt: Attempt, actor: Actor, reason: str) -> AttemptDiscard:
    """Record that a terminal attempt's work is not wanted, so its clean worktree may be pruned.

    Only an ended attempt: a live holder's work is never discarded from under
    it. Discarding twice keeps the first record. Deletes nothing itself.
    """
    reason = _clean_text(reason, name="reason", required=True)
    now = clock.now()
    locked = (
        Attempt.objects.select_for_update(no_key=True, of=("self",)).select_related("task__project").get(pk=attempt.pk)
    )
    if locked.status == AttemptStatus.ACTIVE:
        raise ValidationFailed(
            "Only an ended attempt can be discarded; revoke it first.", details={"attempt": locked.pk}
        )
    existing = AttemptDiscard.objects.filter(attempt=locked).first()
    if existing is not None:
        return existing
    discard = AttemptDiscard.objects.create(attempt=locked, discarded_by=actor.label, reason=reason, discarded_at=now)
    event_append(
        type=EventType.ATTEMPT_DISCARDED,
        severity=Severity.WARN,
        actor=actor,
        at=now,
        task=locked.task,
        attempt_id=locked.pk,
        payload={"branch": locked.branch, "status": locked.status, "reason": reason[:500]},
    )
    return discard
