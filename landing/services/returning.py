"""What a failed landing does to a task (SPEC §21.2): a `landing` note, back to `ready`, quarantine.

The note goes on the task's `land` attempt; the next work attempt's context shows it first, and the
branch is inherited (the delivered branch was the last work attempt's), so the next agent fixes or
rebases it. `Task.failed_landings` counts failed landings since the task last landed;
`Project.max_failed_landings` in a row (0: never) quarantine the task (§16.4's quarantine: blocked
with a reason starting "quarantined:", released by an admin).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F

from core.prepared import insert
from landing.models import LandingTask
from leases.models import NOTE_MAX_CHARS, Note, NoteKind
from leases.services.quarantine import QUARANTINE_REASON_PREFIX
from ledger.actors import SYSTEM
from ledger.models import EventType, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task


def landing_note(entry: LandingTask, *, text: str, now: datetime) -> Note:
    """The `landing` note on the entry's attempt: bounded to a note's size, keeping the end (the tail)."""
    if len(text) > NOTE_MAX_CHARS:
        marker = "…(earlier output cut)…\n"
        text = marker + text[-(NOTE_MAX_CHARS - len(marker)) :]
    return insert(
        Note(
            attempt_id=entry.attempt_id,
            kind=NoteKind.LANDING,
            content=text,
            next_steps=[],
            important=True,
            created_at=now,
        )
    )


def count_failed_landing(entry: LandingTask, *, now: datetime, note: str) -> Task:
    """Record one failed landing of the entry's task: its note, the count, and quarantine at the limit."""
    landing_note(entry, text=note, now=now)
    Task.objects.filter(pk=entry.task_id).update(failed_landings=F("failed_landings") + 1)
    task = lock_task(entry.task_id)
    limit = task.project.max_failed_landings
    if limit and task.failed_landings >= limit and task.status in (TaskStatus.DELIVERED, TaskStatus.READY):
        reason = (
            f"{QUARANTINE_REASON_PREFIX} {task.failed_landings} landings in a row failed "
            f"(last: landing {entry.landing_id}, {entry.outcome})"
        )
        task, _ = apply_task_update(
            locked=task, actor=SYSTEM, changes={"status": TaskStatus.BLOCKED, "blocked_reason": reason}, now=now
        )
        event_append(
            type=EventType.TASK_QUARANTINED,
            severity=Severity.WARN,
            actor=SYSTEM,
            at=now,
            task=task,
            attempt_id=entry.attempt_id,
            payload={"landings": task.failed_landings, "last_landing": entry.landing_id, "last_outcome": entry.outcome},
        )
    return task


def send_back(entry: LandingTask, *, now: datetime, note: str) -> Task:
    """A task whose landing failed goes back to `ready` on its inherited branch, with the note."""
    task = lock_task(entry.task_id)
    if task.status == TaskStatus.DELIVERED:
        apply_task_update(locked=task, actor=SYSTEM, changes={"status": TaskStatus.READY}, now=now)
    return count_failed_landing(entry, now=now, note=note)
