"""Reads of the runners room: the runner a token names, runners with their slots, online or not."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from ledger.tokens import hash_token
from runners.models import Runner, RunnerSlot
from runners.services.heartbeats import lost_after
from runners.tokens import RUNNER_TOKEN_PREFIX

TOKEN_MAX_CHARS = 200


def runner_for_token(token: str) -> Runner | None:
    """The active runner whose token this is, or None."""
    if not token.startswith(RUNNER_TOKEN_PREFIX) or len(token) > TOKEN_MAX_CHARS:
        return None
    return Runner.objects.filter(token_hash=hash_token(token), is_active=True).first()


def runners_with_slots() -> QuerySet[Runner]:
    """Every runner, its projects and its slots (with their agents) prefetched: the console's list."""
    return Runner.objects.prefetch_related("projects", "slot_rows__agent").order_by("name")


def runner_slots(runner: Runner) -> QuerySet[RunnerSlot]:
    return RunnerSlot.objects.filter(runner=runner).select_related("agent").order_by("number")


def runner_online(runner: Runner, *, now: datetime) -> bool:
    """Online: registered and heard from within the lost threshold (the job marks the rest lost)."""
    last = runner.last_heartbeat_at
    return runner.is_active and last is not None and runner.lost_at is None and now - last < lost_after()
