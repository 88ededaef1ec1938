"""Cordon and drain (SPEC §23.1): a runner that takes no new work, through the agents' own pause.

Each slot is an agent, so "take no new work" is the existing agent pause (`ledger.services.agent_pause`):
claim-next refuses a paused slot agent `AGENT_PAUSED` like any paused agent, while the leases it holds
renew and finish as usual. A cordoned or draining runner's slot agents are paused with the reason
"runner cordoned" / "runner draining"; uncordon and undrain resume them once neither holds, and only
those the runner paused (an agent an admin paused for a reason of their own stays paused).
"""

from __future__ import annotations

from datetime import datetime

from core.db import write_transaction
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType
from ledger.services import agent_pause, agent_resume, event_append
from runners.models import Runner

CORDONED_REASON = "runner cordoned"
DRAINING_REASON = "runner draining"
RUNNER_PAUSE_REASONS = frozenset({CORDONED_REASON, DRAINING_REASON})


def lock_runner(runner: Runner) -> Runner:
    """The runner's row, locked for the rest of the transaction: its registrations, heartbeats and
    console actions happen one after another."""
    return Runner.objects.select_for_update(of=("self",)).get(pk=runner.pk)


def sync_slot_pauses(runner: Runner, *, actor: Actor) -> None:
    """Pause the (locked) runner's slot agents while it is cordoned or draining; else resume the ones it paused."""
    reason = CORDONED_REASON if runner.cordoned_at else DRAINING_REASON if runner.draining_at else ""
    for agent in Agent.objects.filter(runner_slot__runner=runner).order_by("pk"):
        if reason and agent.claims_paused_at is None:
            agent_pause(agent=agent, actor=actor, reason=reason)
        elif not reason and agent.claims_paused_at is not None and agent.pause_reason in RUNNER_PAUSE_REASONS:
            agent_resume(agent=agent, actor=actor, reason=f"runner {runner.name} takes work again")


def _set(runner: Runner, *, field: str, on: bool, now: datetime) -> bool:
    """Compare-and-set the runner's `cordoned_at` / `draining_at`; whether it changed."""
    condition = {f"{field}__isnull": on}
    return bool(Runner.objects.filter(pk=runner.pk, **condition).update(**{field: now if on else None}))


def _toggle(runner: Runner, *, field: str, on: bool, event: EventType, actor: Actor) -> bool:
    now = clock.now()
    locked = lock_runner(runner)
    changed = _set(locked, field=field, on=on, now=now)
    if changed:
        locked.refresh_from_db()
        sync_slot_pauses(locked, actor=actor)
        event_append(type=event, actor=actor, at=now, payload={"runner": locked.name})
    runner.refresh_from_db()
    return changed


@write_transaction
def runner_cordon(*, runner: Runner, actor: Actor) -> bool:
    """Take no new work on any slot of the runner (its slot agents pause); what runs goes on. One
    `runner.cordoned` event when it changed; returns whether it did."""
    return _toggle(runner, field="cordoned_at", on=True, event=EventType.RUNNER_CORDONED, actor=actor)


@write_transaction
def runner_uncordon(*, runner: Runner, actor: Actor) -> bool:
    """Let the runner take work again (unless it is also draining). One `runner.uncordoned` event when it changed."""
    return _toggle(runner, field="cordoned_at", on=False, event=EventType.RUNNER_UNCORDONED, actor=actor)


@write_transaction
def runner_drain(*, runner: Runner, actor: Actor) -> bool:
    """Finish what runs, take no new work: the slot agents pause and the runner's heartbeat answers
    `draining: true`. One `runner.draining` event when it changed."""
    return _toggle(runner, field="draining_at", on=True, event=EventType.RUNNER_DRAINING, actor=actor)


@write_transaction
def runner_undrain(*, runner: Runner, actor: Actor) -> bool:
    """End a drain (unless it is also cordoned, the slots take work again). One `runner.undrained` event."""
    return _toggle(runner, field="draining_at", on=False, event=EventType.RUNNER_UNDRAINED, actor=actor)
