"""Runners under concurrency, with real threads and their own connections, on both databases."""

from __future__ import annotations

import pytest

from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType
from ledger.tokens import hash_token
from runners.models import Runner
from runners.services import SlotReport, runner_cordon, runner_heartbeat, runner_register, runner_uncordon
from tests.concurrency import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_registrations_racing_leave_exactly_one_set_of_working_slot_tokens(runner):
    for _ in range(5):
        results = run_in_threads(
            2,
            lambda i: runner_register(
                runner=Runner.objects.get(pk=runner.pk), host=f"h{i}", version="v", pid=i, actor=SYSTEM
            ),
        )
        assert not [r for r in results if isinstance(r, BaseException)], results
        stored = {agent.handle: agent.token_hash for agent in Agent.objects.filter(runner_slot__runner=runner)}
        working = [
            registration
            for registration in results
            if all(stored[slot.agent] == hash_token(slot.token) for slot in registration.slots)
        ]
        assert len(working) == 1
        # Not a mix of the two: the other registration's tokens all fail.
        loser = next(r for r in results if r is not working[0])
        assert not any(stored[slot.agent] == hash_token(slot.token) for slot in loser.slots)


def test_heartbeats_racing_with_cordon_and_uncordon_leave_the_flags_and_pauses_consistent(runner):
    runner_register(runner=runner, host="h", version="v", pid=1, actor=SYSTEM)

    def work(index: int) -> object:
        fresh = Runner.objects.get(pk=runner.pk)
        for round_ in range(10):
            if index == 0:
                (runner_cordon if round_ % 2 == 0 else runner_uncordon)(runner=fresh, actor=SYSTEM)
            else:
                runner_heartbeat(runner=fresh, slots=[SlotReport(number=1, state="idle")])
        return (runner_cordon if index == 0 else runner_heartbeat)(
            **({"runner": fresh, "actor": SYSTEM} if index == 0 else {"runner": fresh, "slots": []})
        )

    results = run_in_threads(3, work)
    assert not [r for r in results if isinstance(r, BaseException)], results
    runner.refresh_from_db()
    assert runner.cordoned_at is not None
    assert runner_heartbeat(runner=runner, slots=[]).cordoned is True
    paused = set(Agent.objects.filter(runner_slot__runner=runner).values_list("claims_paused_at", flat=True))
    assert None not in paused
    cordons = Event.objects.filter(type=EventType.RUNNER_CORDONED).count()
    uncordons = Event.objects.filter(type=EventType.RUNNER_UNCORDONED).count()
    assert cordons == uncordons + 1
