"""The holder's notes (progress, findings, checkpoints) and git facts; each write renews the lease and is work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.combined import insert_part, run_combined_at_once
from core.errors import LedgerError, ValidationFailed
from core.prepared import insert
from leases.models import (
    AGENT_NOTE_KINDS,
    NEXT_STEP_MAX_CHARS,
    NEXT_STEPS_MAX_ITEMS,
    NOTE_MAX_CHARS,
    Attempt,
    Note,
    NoteKind,
)
from leases.services.git_facts import git_facts, record_git_facts
from leases.services.holding import (
    EXTENDED_COLUMNS,
    HolderProof,
    extend_lease,
    extended_attempt,
    fenced_extension,
    held_attempt,
    refusals_after_commit,
)
from leases.services.usage import Usage, budget_refusal, validate_usage
from ledger import clock
from ledger.actors import Actor
from ledger.models import Event, EventType, Project, Task
from ledger.services import event_row


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


def _note_added(note: Note, *, held: Attempt, now: datetime) -> Event:
    """The note's `note.added` event, unsaved."""
    return event_row(
        type=EventType.NOTE_ADDED,
        actor=Actor(agent=held.agent),
        at=now,
        task=held.task,
        attempt_id=held.pk,
        payload={
            "note": note.pk,
            "kind": note.kind,
            "important": note.important,
            "checkpoint": note.kind == NoteKind.CHECKPOINT,
        },
    )


def _written_at_once(proof: HolderProof, note: Note, *, now: datetime) -> NoteWritten | None:
    """PostgreSQL: the fenced extension (`fenced_extension`), the note and its event as one statement
    without a transaction; None when it wrote nothing or does not apply (the caller runs the full path).

    The note and the event read the extension's row (`held`), so they are written only when it
    renewed; the event reads the note's id from its INSERT.
    """
    extension = fenced_extension(proof, now=now, seconds=None, renewal=False)
    if extension is None:
        return None
    held = Attempt(pk=0, agent=proof.agent, task=Task(pk=0, project=Project(pk=0)))
    note_sql, note_params = insert_part(note, source="held", computed={"attempt_id": "held.a_id"})
    event_sql, event_params = insert_part(
        _note_added(note, held=held, now=now),
        source="held, note",
        computed={
            "project_id": "held.t_project_id",
            "task_id": "held.a_task_id",
            "attempt_id": "held.a_id",
            "payload": "%s || jsonb_build_object('note', note.id)",
        },
    )
    rows = run_combined_at_once(
        [
            ("held", *extension),
            ("note", f"{note_sql} RETURNING id", note_params),
            ("event", event_sql, event_params),
        ],
        (f"SELECT note.id, {EXTENDED_COLUMNS} FROM held, note", []),  # noqa: S608 - fixed column names
    )
    if not rows:
        return None
    note.pk = rows[0][0]
    note._state.adding = False
    note._state.db = "default"
    note.attempt = extended_attempt(rows[0][1:], proof)
    return NoteWritten(note=note, lease_expires_at=note.attempt.lease_expires_at)


def note_add(
    *,
    proof: HolderProof,
    kind: str,
    content: str,
    next_steps: Sequence[str] = (),
    important: bool = False,
    usage: Any = None,
) -> NoteWritten:
    """Add a progress, finding, warning or checkpoint note; renews the lease.

    `usage` is counted first; a spent budget answers BUDGET_EXHAUSTED and writes no note.
    On PostgreSQL a note without usage is first tried as one statement outside any transaction
    (`_written_at_once`); the full path runs when that one writes nothing or does not apply.
    """
    if kind not in AGENT_NOTE_KINDS:
        raise ValidationFailed(f"kind must be one of {', '.join(AGENT_NOTE_KINDS)}.")
    if not isinstance(content, str) or not content.strip():
        raise ValidationFailed("content must be a non-empty string.")
    if len(content) > NOTE_MAX_CHARS:
        raise ValidationFailed(
            f"content is {len(content)} characters; a note holds at most {NOTE_MAX_CHARS}.",
            details={"fields": {"content": [f"at most {NOTE_MAX_CHARS} characters"]}, "length": len(content)},
        )
    steps = validate_next_steps(next_steps)
    spent = validate_usage(usage)
    now = clock.now()
    if spent is None or spent.is_empty():
        note = Note(
            attempt_id=0, kind=kind, content=content, next_steps=steps, important=bool(important), created_at=now
        )
        written = _written_at_once(proof, note, now=now)
        if written is not None:
            return written
    return _note_add(proof=proof, kind=kind, content=content, steps=steps, important=important, spent=spent, now=now)


@refusals_after_commit
def _note_add(
    *,
    proof: HolderProof,
    kind: str,
    content: str,
    steps: list[str],
    important: bool,
    spent: Usage | None,
    now: datetime,
) -> NoteWritten | LedgerError:
    held = held_attempt(proof, now=now, lock_task=False, lean=True)
    if isinstance(held, LedgerError):
        return held
    refusal = budget_refusal(held, spent, now=now, actor=Actor(agent=held.agent))
    if refusal is not None:
        return refusal
    expires = extend_lease(held, now=now, seconds=held.lease_seconds, renewal=False)
    note = insert(
        Note(attempt=held, kind=kind, content=content, next_steps=steps, important=bool(important), created_at=now)
    )
    insert(_note_added(note, held=held, now=now))
    return NoteWritten(note=note, lease_expires_at=expires)


@refusals_after_commit
def attempt_set_git(
    *,
    proof: HolderProof,
    branch: str | None = None,
    base_commit: str | None = None,
    head_commit: str | None = None,
    commits_ahead: int | None = None,
    dirty: bool | None = None,
    pushed: bool | None = None,
    worktree_path: str | None = None,
    host: str | None = None,
    usage: Any = None,
) -> Attempt | LedgerError:
    """Record the attempt's git facts (`leases.services.git_facts`); renews the lease.

    A new branch rewrites the label; what changed is one `attempt.updated`. A report whose facts
    are all null renews the lease and records nothing.
    """
    validated = git_facts(
        {
            "branch": branch,
            "base_commit": base_commit,
            "head_commit": head_commit,
            "commits_ahead": commits_ahead,
            "dirty": dirty,
            "pushed": pushed,
            "worktree_path": worktree_path,
            "host": host,
        }
    )
    spent = validate_usage(usage)
    # Every fact null (each "not reported", as the schema says) reports nothing: a sign of life
    # that renews the lease like a heartbeat, not work (`last_worked_at` stays, no event).
    reported = bool(validated.given()) or spent is not None
    now = clock.now()
    held = held_attempt(proof, now=now, lock_task=False)
    if isinstance(held, LedgerError):
        return held
    refusal = budget_refusal(held, spent, now=now, actor=Actor(agent=held.agent))
    if refusal is not None:
        return refusal
    extend_lease(held, now=now, seconds=held.lease_seconds, renewal=not reported)
    record_git_facts(held, validated, now=now, actor=Actor(agent=held.agent))
    return held
