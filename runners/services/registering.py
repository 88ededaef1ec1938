"""A runner's registration (SPEC §23.1): fresh slot tokens, and the dead slots' attempts handed off at once.

A runner registers when it starts. Whatever its slots held before then belonged to a process that is
gone (a crash, a `kill -9`, a reboot): every live attempt of its slot agents is handed off in the same
transaction, as `runner_restart` (work and review attempts, `leases.services.attempt_hand_off`; a live
landing through `landing.services.landing_hand_back`), so its tasks are claimable now, not when the
leases would have expired. Every slot agent's token is rotated in that transaction too: a zombie
process from before the restart holds tokens that no longer work.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import write_transaction
from core.errors import ValidationFailed
from landing.models import Landing, LandingStatus
from landing.services import landing_hand_back
from leases.models import Attempt, AttemptKind, AttemptStatus, InterruptionReason
from leases.services import attempt_hand_off
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType
from ledger.services import agent_rotate_token, event_append
from runners.models import HOST_MAX_CHARS, VERSION_MAX_CHARS, Runner, RunnerSlot, SlotState
from runners.services.pausing import lock_runner

PID_MAX = 2**31 - 1


@dataclass(frozen=True)
class SlotCredential:
    number: int
    agent: str
    token: str


@dataclass(frozen=True)
class HandedOffAttempt:
    attempt_id: int
    task: str


@dataclass(frozen=True)
class Registration:
    runner: Runner
    slots: list[SlotCredential]
    handed_off: list[HandedOffAttempt]


def _validate(host: str, version: str, pid: int) -> None:
    problems: dict[str, list[str]] = {}
    if not isinstance(host, str) or len(host) > HOST_MAX_CHARS:
        problems["host"] = [f"at most {HOST_MAX_CHARS} characters"]
    if not isinstance(version, str) or len(version) > VERSION_MAX_CHARS:
        problems["version"] = [f"at most {VERSION_MAX_CHARS} characters"]
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid <= PID_MAX:
        problems["pid"] = [f"0 to {PID_MAX}"]
    if problems:
        raise ValidationFailed("Invalid registration.", details={"fields": problems})


def _hand_off_slots(runner: Runner, agent_ids: list[int], *, actor: Actor, host: str) -> list[HandedOffAttempt]:
    """Hand off every live attempt of these slot agents (`runner_restart`)."""
    note = (
        f"Runner {runner.name} registered again (restarted, now on {host or 'an unnamed host'}): "
        "this attempt's process is gone, so it was handed off at once. Its work is on its branch."
    )
    live = list(
        Attempt.objects.filter(agent_id__in=agent_ids, status=AttemptStatus.ACTIVE)
        .select_related("task")
        .order_by("pk")
    )
    handed: list[HandedOffAttempt] = []
    for attempt in live:
        if attempt.kind == AttemptKind.LAND:
            continue
        result = attempt_hand_off(
            attempt=attempt, actor=actor, reason_code=InterruptionReason.RUNNER_RESTART, note=note
        )
        if result is not None:
            handed.append(HandedOffAttempt(attempt_id=result.attempt_id, task=result.task_key))
    landings = Landing.objects.filter(agent_id__in=agent_ids, status=LandingStatus.ACTIVE).order_by("pk")
    for landing in landings:
        ended = landing_hand_back(
            landing=landing, actor=actor, reason_code=InterruptionReason.RUNNER_RESTART, note=note
        )
        keys = dict(Attempt.objects.filter(pk__in=ended).values_list("pk", "task__key"))
        handed.extend(HandedOffAttempt(attempt_id=pk, task=keys[pk]) for pk in ended)
    return handed


@write_transaction
def runner_register(*, runner: Runner, host: str, version: str, pid: int, actor: Actor) -> Registration:
    """Register the (re)started runner: new tokens for every slot agent, returned once; every live
    attempt of its slots handed off (`runner_restart`); host, version and pid recorded; `lost_at`
    cleared; the slots' reported states reset to idle; one `runner.registered` event.

    Keeps: after two registrations of one runner, only the later one's slot tokens work (the runner
    row is locked first, so registrations run one after another, and each rotates every token).
    """
    _validate(host, version, pid)
    now = clock.now()
    locked = lock_runner(runner)
    if not locked.is_active:
        raise ValidationFailed(f"Runner {locked.name} is deactivated.", details={"runner": locked.name})
    slots = list(RunnerSlot.objects.filter(runner=locked).select_related("agent").order_by("number"))
    handed = _hand_off_slots(locked, [slot.agent_id for slot in slots], actor=actor, host=host)
    credentials = []
    for slot in slots:
        _, token = agent_rotate_token(agent=slot.agent, actor=actor)
        credentials.append(SlotCredential(number=slot.number, agent=slot.agent.handle, token=token))
    RunnerSlot.objects.filter(runner=locked).update(
        state=SlotState.IDLE, attempt_id=None, task_key="", reported_at=now, cancel_attempt_id=None
    )
    Runner.objects.filter(pk=locked.pk).update(
        host=host, version=version, pid=pid, registered_at=now, last_heartbeat_at=now, lost_at=None
    )
    locked.refresh_from_db()
    event_append(
        type=EventType.RUNNER_REGISTERED,
        actor=actor,
        at=now,
        payload={
            "runner": locked.name,
            "host": host[:200],
            "version": version[:100],
            "pid": pid,
            "handed_off": [item.attempt_id for item in handed],
        },
    )
    return Registration(runner=locked, slots=credentials, handed_off=handed)
