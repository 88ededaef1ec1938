"""The holder's notes (progress, findings, checkpoints) and git facts; each write renews the lease."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from config.errors import LedgerError, ValidationFailed
from leases.branches import validate_branch_name
from leases.labels import parse_label, render_label
from leases.models import NEXT_STEP_MAX_CHARS, NEXT_STEPS_MAX_ITEMS, NOTE_MAX_CHARS, Attempt, Note, NoteKind
from leases.services.claims import validate_base_commit
from leases.services.holding import HolderProof, extend_lease, held_attempt, refusals_after_commit
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType
from ledger.services import event_append


def validate_next_steps(next_steps: Any) -> list[str]:
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
    steps = validate_next_steps(next_steps)
    now = clock.now()
    held = held_attempt(proof, now=now, lock_task=False, lean=True)
    if isinstance(held, LedgerError):
        return held
    expires = extend_lease(held, now=now, seconds=held.lease_seconds, renewal=False)
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
    held = held_attempt(proof, now=now, lock_task=False)
    if isinstance(held, LedgerError):
        return held
    extend_lease(held, now=now, seconds=held.lease_seconds, renewal=False)
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
