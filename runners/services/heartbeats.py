"""Heartbeats and lost runners (SPEC §23.1).

A runner heartbeats every `HEARTBEAT_SECONDS` with each slot's state; the answer tells it whether it
is cordoned or draining and which attempts the console cancelled. A runner whose last heartbeat is
older than `LOST_AFTER_MISSED` heartbeats is marked lost by the job (`runner.lost`, once); its slots'
attempts are not handed off then (a partitioned runner keeps working while its leases hold, and they
expire on their own otherwise): they are handed off when it registers again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from core.db import write_transaction
from core.errors import ValidationFailed
from core.prepared import SAMPLE_INT, SAMPLE_TIME, Prepared, PreparedUpdate
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import EventType, Severity
from ledger.services import event_append
from runners.models import Runner, RunnerSlot, SlotState

HEARTBEAT_SECONDS = 15
LOST_AFTER_MISSED = 3
TASK_KEY_MAX_CHARS = 20
ATTEMPT_ID_MAX = 2**63 - 1


@dataclass(frozen=True)
class SlotReport:
    number: int
    state: str
    attempt_id: int | None = None
    task: str | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    cordoned: bool
    draining: bool
    cancel: list[int]
    heartbeat_seconds: int = HEARTBEAT_SECONDS


def lost_after() -> timedelta:
    return timedelta(seconds=HEARTBEAT_SECONDS * LOST_AFTER_MISSED)


def _validate(runner: Runner, reports: list[SlotReport]) -> None:
    problems: list[str] = []
    numbers = [report.number for report in reports]
    if len(set(numbers)) != len(numbers):
        problems.append("each slot at most once")
    for report in reports:
        if not 1 <= report.number <= runner.slots:
            problems.append(f"slot {report.number}: runner {runner.name} has slots 1 to {runner.slots}")
        if report.state not in SlotState.values:
            problems.append(f"slot {report.number}: state is one of {', '.join(SlotState.values)}")
        if report.attempt_id is not None and not 1 <= report.attempt_id <= ATTEMPT_ID_MAX:
            problems.append(f"slot {report.number}: attempt_id is a positive id")
        if report.task is not None and len(report.task) > TASK_KEY_MAX_CHARS:
            problems.append(f"slot {report.number}: task is a task key")
    if problems:
        raise ValidationFailed("; ".join(problems[:10]) + ".", details={"fields": {"slots": problems[:50]}})


def _cancel_still_running(cancel_attempt_id: int, report: SlotReport | None) -> bool:
    """Whether the slot may still run the attempt the console cancelled: it reports that attempt, or
    is busy without having said which yet. Once it reports another attempt or idles, the cancel is done."""
    if report is None:
        return True
    if report.attempt_id is not None:
        return report.attempt_id == cancel_attempt_id
    return report.state != SlotState.IDLE


# An idle runner's beat is these two statements (a heartbeat per runner every 15 s): compiled once (`core.prepared`).
_BEAT = PreparedUpdate(
    lambda runner_id, now: (Runner.objects.filter(pk=runner_id), {"last_heartbeat_at": now, "lost_at": None}),
    samples=({"runner_id": SAMPLE_INT[0], "now": SAMPLE_TIME[0]}, {"runner_id": SAMPLE_INT[1], "now": SAMPLE_TIME[1]}),
)
_SLOTS: Prepared[RunnerSlot] = Prepared(
    lambda runner_id: (
        RunnerSlot.objects.filter(runner_id=runner_id)
        .order_by("number")
        .values_list(
            "pk",
            "number",
            "state",
            "attempt_id",
            "task_key",
            "cancel_attempt_id",
            "runner__cordoned_at",
            "runner__draining_at",
        )
    ),
    samples=({"runner_id": SAMPLE_INT[0]}, {"runner_id": SAMPLE_INT[1]}),
)


@write_transaction
def runner_heartbeat(*, runner: Runner, slots: list[SlotReport]) -> HeartbeatAnswer:
    """Store each reported slot's state; clear `lost_at`; answer cordoned / draining and the attempts
    cancelled from the console that the runner still runs (so it stops their commands now).

    Keeps: a cancel stays asked until the runner reports the slot on another attempt or idle.
    Writes only what changed: a slot reported as it is stored is not written (an idle runner's beat is one
    UPDATE of its own row), so `reported_at` is when the slot's report last changed; the runner's
    `last_heartbeat_at` says when it last reported at all. The runner's row is updated first: its row lock
    orders the beat after a console cancel in flight (`slot_cancel_attempt` locks that row), so the slots
    read next see it. No event (one every 15 s per runner would bury the audit log).
    """
    _validate(runner, slots)
    now = clock.now()
    _BEAT.run(runner_id=runner.pk, now=now)
    reported = {report.number: report for report in slots}
    rows = _SLOTS.rows(runner_id=runner.pk)
    cancel: list[int] = []
    for pk, number, slot_state, attempt_id, task_key, cancel_attempt_id, _, _ in rows:
        report = reported.get(number)
        changes: dict[str, object] = {}
        if report is not None and (slot_state, attempt_id, task_key) != (
            report.state,
            report.attempt_id,
            report.task or "",
        ):
            changes = {
                "state": report.state,
                "attempt_id": report.attempt_id,
                "task_key": report.task or "",
                "reported_at": now,
            }
        if cancel_attempt_id is not None:
            if _cancel_still_running(cancel_attempt_id, report):
                cancel.append(cancel_attempt_id)
            else:
                changes["cancel_attempt_id"] = None
        if changes:
            RunnerSlot.objects.filter(pk=pk).update(**changes)
    if rows:
        cordoned_at, draining_at = rows[0][6], rows[0][7]
    else:
        cordoned_at, draining_at = Runner.objects.filter(pk=runner.pk).values_list("cordoned_at", "draining_at").get()
    return HeartbeatAnswer(cordoned=cordoned_at is not None, draining=draining_at is not None, cancel=sorted(cancel))


@write_transaction
def runners_mark_lost(*, actor: Actor = SYSTEM) -> list[str]:
    """Mark lost every active runner whose last heartbeat is older than `LOST_AFTER_MISSED` heartbeats;
    one `runner.lost` (warning) per runner, once until it heartbeats or registers again.

    Keeps: exactly one event per loss, whoever runs the job at once (compare-and-set on `lost_at`,
    re-checking the heartbeat in the same UPDATE, so a heartbeat that commits first wins).
    A runner that never registered is not lost: it was never there. Returns the names marked.
    """
    now = clock.now()
    threshold = now - lost_after()
    candidates = list(
        Runner.objects.filter(is_active=True, lost_at__isnull=True, last_heartbeat_at__lte=threshold)
        .order_by("last_heartbeat_at")
        .values_list("pk", "name", "last_heartbeat_at")
    )
    marked: list[str] = []
    for pk, name, last in candidates:
        changed = Runner.objects.filter(pk=pk, lost_at__isnull=True, last_heartbeat_at__lte=threshold).update(
            lost_at=now
        )
        if not changed or last is None:
            continue
        marked.append(name)
        event_append(
            type=EventType.RUNNER_LOST,
            severity=Severity.WARN,
            actor=actor,
            at=now,
            payload={
                "runner": name,
                "last_heartbeat_at": last.isoformat(),
                "missed_heartbeats": int((now - last).total_seconds() // HEARTBEAT_SECONDS),
            },
        )
    return marked
