"""Reads of the runners room: the runner a token names, runners with their slots, online or not."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.db.models import Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from core.prepared import Prepared
from leases.models import Attempt, AttemptStatus
from ledger.models import Event, EventType
from ledger.tokens import hash_token
from runners.models import Runner, RunnerSlot
from runners.services.heartbeats import lost_after
from runners.tokens import RUNNER_TOKEN_PREFIX

TOKEN_MAX_CHARS = 200


# Every runner request (a heartbeat per runner every 15 s) runs it: compiled once (`core.prepared`).
_ACTIVE_RUNNER_BY_TOKEN_HASH: Prepared[Runner] = Prepared(
    lambda digest: Runner.objects.filter(token_hash=digest, is_active=True).order_by("pk")[:1],
    samples=({"digest": "sample:token-hash-0"}, {"digest": "sample:token-hash-1"}),
)


def runner_for_token(token: str) -> Runner | None:
    """The active runner whose token this is, or None."""
    if not token.startswith(RUNNER_TOKEN_PREFIX) or len(token) > TOKEN_MAX_CHARS:
        return None
    return _ACTIVE_RUNNER_BY_TOKEN_HASH.first(digest=hash_token(token))


def runners_with_slots() -> QuerySet[Runner]:
    """Every runner, its projects and its slots (with their agents) prefetched: the console's list."""
    return Runner.objects.prefetch_related("projects", "slot_rows__agent").order_by("name")


def runner_slots(runner: Runner) -> QuerySet[RunnerSlot]:
    return RunnerSlot.objects.filter(runner=runner).select_related("agent").order_by("number")


def runner_online(runner: Runner, *, now: datetime) -> bool:
    """Online: registered and heard from within the lost threshold (the job marks the rest lost)."""
    last = runner.last_heartbeat_at
    return runner.is_active and last is not None and runner.lost_at is None and now - last < lost_after()


# --- the console's reads (console.runners) -------------------------------------------------------


class RunnerStatus:
    """What the console calls a runner's connection, from its last heartbeat and `lost_at`."""

    ONLINE = "online"  # heard from within the lost threshold
    OFFLINE = "offline"  # heartbeats missed, not (yet) marked lost by the job
    LOST = "lost"  # marked lost by the job (`runner.lost`)
    NEVER = "unregistered"  # created, never registered
    DEACTIVATED = "deactivated"


def runner_status(runner: Runner, *, now: datetime) -> str:
    """One of `RunnerStatus`; `runner_online` is the ONLINE case."""
    if not runner.is_active:
        return RunnerStatus.DEACTIVATED
    if runner.lost_at is not None:
        return RunnerStatus.LOST
    if runner.last_heartbeat_at is None:
        return RunnerStatus.NEVER
    return RunnerStatus.ONLINE if runner_online(runner, now=now) else RunnerStatus.OFFLINE


def online_q(*, now: datetime) -> Q:
    """The runners `runner_online` calls online, as a filter (the console's status filter)."""
    return Q(is_active=True, lost_at__isnull=True, last_heartbeat_at__gt=now - lost_after())


def live_attempts_of_slots(slots: Iterable[RunnerSlot], *, now: datetime) -> dict[int, Attempt]:
    """Each slot agent's live attempt (with its task), by agent id: one query for all the slots.

    The ledger's truth, which `slot_cancel_attempt` acts on; the runner's own report is on the slot.
    """
    agent_ids = [slot.agent_id for slot in slots]
    live = (
        Attempt.objects.filter(agent_id__in=agent_ids, status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
        .select_related("task")
        .order_by("agent_id", "-pk")
    )
    found: dict[int, Attempt] = {}
    for attempt in live:
        found.setdefault(attempt.agent_id, attempt)
    return found


RUNNER_EVENT_TYPES = tuple(value for value in EventType.values if value.startswith("runner."))
# The runner's event ids on SQLite, through the type index by name (`runner_events`).
SQLITE_RUNNER_EVENT_IDS = (
    "SELECT id FROM ledger_event INDEXED BY event_type_time "  # noqa: S608 (no input in the text)
    f"WHERE type IN ({', '.join(['%s'] * len(RUNNER_EVENT_TYPES))}) AND json_extract(payload, '$.runner') = %s"
)


def runner_events(runner: Runner, *, limit: int = 30) -> QuerySet[Event]:
    """The runner's latest events (registered, lost, cordoned, …), newest first, with their actors.

    The ids come from a subquery on the type index (`event_type_time`), then the newest `limit` of them
    by primary key: the runner events only, however long the event log. As one statement with `ORDER BY
    id DESC LIMIT`, SQLite's planner walks the whole log backwards for a runner's few events (350 ms at
    400k events, bench.pages). On SQLite the subquery names its index (`INDEXED BY`): its statistics give
    the average rows per type, so nine types look like half the log and it scanned all of it for the
    ids (138 ms at 100k events, round two of docs/performance.md "Console pages follow live work").
    """
    ids: Subquery | RawSQL
    if connection.vendor == "sqlite":
        ids = RawSQL(SQLITE_RUNNER_EVENT_IDS, [*RUNNER_EVENT_TYPES, runner.name])  # noqa: S611 (parameters only)
    else:
        ids = Subquery(
            Event.objects.filter(type__in=RUNNER_EVENT_TYPES, payload__runner=runner.name).order_by().values("id")
        )
    return Event.objects.filter(id__in=ids).select_related("actor_user", "actor_agent", "task").order_by("-id")[:limit]
