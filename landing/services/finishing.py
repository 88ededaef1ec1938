"""Finishing a landing with what became of each task (SPEC §21.2, §21.3).

The lander reports one outcome per task of the landing: `landed` (in `landed_commit`, pushed with a
compare-and-swap on the target), `conflict` (with the conflicting paths), `check_failed` (with the
check's output tail), `target_moved` (the target kept moving; three tries), or `deferred` (in a
batch, it conflicted only with the tasks before it: it stays queued for the next batch). Landed
tasks become `done` with `landed_commit`, `landed_at`, `landed_by` and `task.landed`; failed ones go
back to `ready` with a `landing` note (`landing.services.returning`) and their landing event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core.errors import LedgerError, ValidationFailed
from landing.models import (
    CONFLICT_PATHS_MAX,
    FAILED_OUTCOMES,
    OUTPUT_TAIL_MAX_CHARS,
    Landing,
    LandingOutcome,
    LandingResult,
    LandingStatus,
    LandingTask,
)
from landing.services.holding import LandingProof, held_landing
from landing.services.returning import send_back
from leases.models import AttemptStatus, FailureReason
from leases.services.ending import end_attempt
from leases.services.holding import refusals_after_commit
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPORTABLE_OUTCOMES = frozenset(LandingOutcome.values) - {
    LandingOutcome.PENDING,
    LandingOutcome.EXPIRED,
    LandingOutcome.RELEASED,
}
PATH_MAX_CHARS = 1000

_EVENT_OF: dict[str, EventType] = {
    LandingOutcome.CONFLICT: EventType.LANDING_CONFLICT,
    LandingOutcome.CHECK_FAILED: EventType.LANDING_CHECK_FAILED,
    LandingOutcome.TARGET_MOVED: EventType.LANDING_TARGET_MOVED,
}


@dataclass(frozen=True)
class TaskResult:
    key: str
    outcome: str
    paths: Sequence[str] = field(default_factory=tuple)
    output_tail: str = ""


def _validate(
    landing: Landing, entries: list[LandingTask], *, result: str, landed_commit: str, tasks: Sequence[TaskResult]
) -> None:
    problems: dict[str, list[str]] = {}
    if result not in LandingResult.values:
        problems["result"] = [f"one of {', '.join(LandingResult.values)}"]
    keys = [entry.task.key for entry in entries]
    reported = [item.key for item in tasks]
    if sorted(reported) != sorted(keys):
        problems["tasks"] = [f"every task of landing {landing.pk} exactly once: {', '.join(keys)}"]
    for item in tasks:
        if item.outcome not in REPORTABLE_OUTCOMES:
            problems.setdefault("tasks.outcome", []).append(
                f"{item.key}: one of {', '.join(sorted(REPORTABLE_OUTCOMES))}"
            )
        if len(item.paths) > CONFLICT_PATHS_MAX or any(
            not isinstance(path, str) or not path or len(path) > PATH_MAX_CHARS for path in item.paths
        ):
            problems.setdefault("tasks.paths", []).append(f"{item.key}: at most {CONFLICT_PATHS_MAX} non-empty paths")
        if len(item.output_tail) > OUTPUT_TAIL_MAX_CHARS:
            problems.setdefault("tasks.output_tail", []).append(
                f"{item.key}: at most {OUTPUT_TAIL_MAX_CHARS} characters"
            )
    landed = any(item.outcome == LandingOutcome.LANDED for item in tasks)
    if landed and not COMMIT.fullmatch(landed_commit or ""):
        problems["landed_commit"] = ["the 40-hex commit the target was pushed to, required when a task landed"]
    if not landed and landed_commit:
        problems["landed_commit"] = ["only when a task landed"]
    if landed != (result == LandingResult.LANDED):
        problems.setdefault("result", []).append("`landed` exactly when at least one task landed")
    if problems:
        raise ValidationFailed(
            "The landing's finish is not consistent: "
            + "; ".join(f"{name}: {messages[0]}" for name, messages in problems.items()),
            details={"fields": problems},
        )


def _note_text(landing: Landing, entry: LandingTask, item: TaskResult) -> str:
    where = f"{entry.task.key} ({entry.branch} at {entry.head_commit[:12]}) onto {landing.target_branch}"
    if item.outcome == LandingOutcome.CONFLICT:
        paths = ", ".join(item.paths) if item.paths else "(the lander named none)"
        return (
            f"Landing {landing.pk} could not merge {where}: conflicts in {paths}. Your branch is inherited: "
            f"rebase it on (or merge) the latest {landing.target_branch}, resolve these paths, and deliver again."
        )
    if item.outcome == LandingOutcome.CHECK_FAILED:
        tail = item.output_tail or "(no output)"
        return (
            f"Landing {landing.pk}: the check `{landing.check_command}` failed on {where}. "
            f"Fix it on your (inherited) branch and deliver again. The end of its output:\n{tail}"
        )
    return (
        f"Landing {landing.pk} gave up on {where}: the target kept moving under it (three tries). "
        "Nothing is wrong with the branch as far as the lander knows; deliver again."
    )


def _land(landing: Landing, entry: LandingTask, *, landed_commit: str, actor: Actor, now: datetime) -> None:
    task = lock_task(entry.task_id)
    end_attempt(entry.attempt, now=now, status=AttemptStatus.COMPLETED, result_summary=f"landed in {landed_commit}")
    if task.status == TaskStatus.DELIVERED:
        task, _ = apply_task_update(locked=task, actor=actor, changes={"status": TaskStatus.DONE}, now=now)
    landed_by = f"landing {landing.pk} ({landing.agent.handle})"
    Task.objects.filter(pk=task.pk).update(
        landed_commit=landed_commit, landed_at=now, landed_by=landed_by, failed_landings=0
    )
    event_append(
        type=EventType.TASK_LANDED,
        actor=actor,
        at=now,
        task=task,
        attempt_id=entry.attempt_id,
        payload={
            "landing": landing.pk,
            "landed_commit": landed_commit,
            "target_branch": landing.target_branch,
            "head_commit": entry.head_commit,
            "landed_by": landed_by,
        },
    )


def _fail(landing: Landing, entry: LandingTask, item: TaskResult, *, actor: Actor, now: datetime) -> None:
    reason = FailureReason.TESTS_FAILED if item.outcome == LandingOutcome.CHECK_FAILED else FailureReason.OTHER
    end_attempt(entry.attempt, now=now, status=AttemptStatus.FAILED, failure_reason_code=reason)
    event_append(
        type=_EVENT_OF[item.outcome],
        severity=Severity.WARN,
        actor=actor,
        at=now,
        task=entry.task,
        attempt_id=entry.attempt_id,
        payload={"landing": landing.pk, "target_branch": landing.target_branch, "paths": list(item.paths)[:20]},
    )
    send_back(entry, now=now, note=_note_text(landing, entry, item))


@refusals_after_commit
def landing_finish(
    *, proof: LandingProof, result: str, tasks: Sequence[TaskResult], landed_commit: str = "", check_runs: int = 0
) -> Landing | LedgerError:
    """End the landing with the lander's report: land, send back or defer each of its tasks."""
    now = clock.now()
    landing = held_landing(proof, now=now)
    if isinstance(landing, LedgerError):
        return landing
    entries = list(LandingTask.objects.filter(landing=landing).select_related("task", "attempt").order_by("position"))
    _validate(landing, entries, result=result, landed_commit=landed_commit, tasks=tasks)
    by_key = {item.key: item for item in tasks}
    actor = Actor(agent=landing.agent)
    for entry in entries:
        item = by_key[entry.task.key]
        LandingTask.objects.filter(pk=entry.pk).update(
            outcome=item.outcome, paths=list(item.paths), output_tail=item.output_tail
        )
        entry.outcome = item.outcome
        if item.outcome == LandingOutcome.LANDED:
            _land(landing, entry, landed_commit=landed_commit, actor=actor, now=now)
        elif item.outcome in FAILED_OUTCOMES:
            _fail(landing, entry, item, actor=actor, now=now)
        else:  # deferred: stays delivered, keeps its place in the queue
            end_attempt(entry.attempt, now=now, status=AttemptStatus.RELEASED)
    Landing.objects.filter(pk=landing.pk).update(
        status=LandingStatus.FINISHED,
        result=result,
        finished_at=now,
        landed_commit=landed_commit,
        check_runs=check_runs,
    )
    landing.status, landing.result, landing.finished_at = LandingStatus.FINISHED, result, now
    landing.landed_commit, landing.check_runs = landed_commit, check_runs
    return landing
