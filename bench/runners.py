"""`--only runners` (issue 31, SPEC §24): what 1,000 idle runner slots cost the server, and a runner's CPU per task.

Idle slots (this module). One production server (`manage.py serve --no-cluster`, the parking worker, as
`bench.claim_waiters` starts it) and `RUNNERS` runners x `SLOTS` slots made with `runners.services.runner_create`.
Each runner registers over HTTP (`POST /runners/register/`, its runner token: the slot agents' tokens come back),
then does what the daemon does while nothing is claimable (`agent/runner/slots.py`, `daemon.py`):

- every slot is a thread of this process with its own `agent.client.LeaseholdClient` (the daemon's client: one
  kept-alive connection, an Idempotency-Key on every POST); as in the daemon, one idle slot per runner holds the
  runner's parking turn (`agent.runner.turns.ParkingTurns`, the daemon's own class) and is parked on
  `POST /claims/next/ {"wait": 60}` (the daemon's default `wait_seconds`) with its own token, asking again when
  answered, while the runner's other slots wait for the turn; a claimed task is finished `done` at once;
- every runner heartbeats every 15 s (`POST /runners/heartbeat/`) from a thread of its own, as the daemon does:
  its slots' states on the first beat, then only the slots whose state changed (none: they stay idle).

The runners' first asks are spread over one wait and their first beats over 15 s: runners on a hundred
machines start independently. (Started all at once, 1,000 deadlines fall in the same second, every minute;
under a loaded machine the answers then came later than the client's 10 s grace and the slots saw
CONNECTION_FAILED and asked again, keeping the herd together.)

Measured from `/proc` (the server's process tree; for PostgreSQL its backends too, `bench.proc_cpu.DatabaseCpu`):

1. the server at rest with no runner at all (`EMPTY_SECONDS`);
2. at rest with every slot parked, over `REST_SECONDS` = one full wait, so each slot's re-ask at its 60 s deadline
   and four heartbeats per runner fall in the window whatever the start times;
3. per unrelated event: tasks created in another project (a `task.created` event each, a type that wakes claim
   waiters) — beyond the rest rate, per event; no slot may be answered;
4. per task handed out: tasks created one at a time in the runners' project; each wakes one slot, which claims
   and finishes it — beyond the rest rate, per task (wake, claim, finish, park again).

The reference: the raw replay (`bench.replay`) of the statements the idle fleet cannot avoid, at the rate the
fleet ran them in the rest window: one heartbeat (`runner_heartbeat` with 10 slots) per runner per 15 s and
one empty claim-next (`lease_claim_next` finding nothing) per runner per wait. The ratio is the rest window's
server CPU over that SQL floor. (The empty server is reported beside it; as a denominator it is a handful of
ticks, so the ratio to it says nothing about how well idling is done.)

A runner's CPU per task is `bench.runner_cpu`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench import http
from bench.claim_waiters import _environment
from bench.environment import Target
from bench.harness import percentile
from bench.results import Row
from bench.runner_floor import Meter, raw_floor

RUNNERS, SLOTS = 100, 10
WAIT_SECONDS = 60  # the daemon's default wait_seconds
HEARTBEAT_SECONDS = 15.0
EMPTY_SECONDS = 15.0
REST_SECONDS = 60.0
EVENTS, EVENT_EVERY_SECONDS = 200, 0.05
TASKS, TASK_EVERY_SECONDS = 30, 0.3
RAW_REPEATS = 300
# Smoke: runners, slots, wait, empty and rest windows, events, tasks, raw repeats.
SMOKE = (4, 5, 5, 2.0, 5.0, 20, 5, 30)
WORKER_CONNECTIONS = 2000  # gunicorn's default 1000 admits 500 waiters per worker: keep-alive spreads unevenly
MIN_CLAIM_INTERVAL_SECONDS = 1.0  # as agent.runner.slots


@dataclass(frozen=True)
class Shape:
    runners: int
    slots: int
    wait: int
    empty_seconds: float
    rest_seconds: float
    events: int
    tasks: int
    raw_repeats: int


FULL_SHAPE = Shape(RUNNERS, SLOTS, WAIT_SECONDS, EMPTY_SECONDS, REST_SECONDS, EVENTS, TASKS, RAW_REPEATS)


def per_second(cpu_seconds: float, wall_seconds: float) -> float:
    """CPU seconds per wall second (1.0 = one core busy)."""
    return cpu_seconds / wall_seconds if wall_seconds > 0 else 0.0


def beyond_rest_ms(cpu_seconds: float, elapsed: float, rest_rate: float, count: int) -> float:
    """Milliseconds of CPU per item beyond what the same time at rest would have cost (never below 0)."""
    return round(max(0.0, cpu_seconds - rest_rate * elapsed) / max(1, count) * 1000, 2)


def floor_rate(*, beats: int, reasks: int, window: float, beat_cpu: float, reask_cpu: float) -> float:
    """CPU seconds per second of the raw SQL floor: the window's heartbeats and re-asks at their replayed cost."""
    return per_second(beats * beat_cpu + reasks * reask_cpu, window)


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter[str] = field(default_factory=Counter)
    claimed: dict[str, float] = field(default_factory=dict)
    asked: int = 0

    def add(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1


class IdleFleet:
    """The runners' side, in threads: registration, the heartbeats, and one parked claim per runner."""

    def __init__(self, server: http.Server, runners: list[str], *, project: str, wait: int) -> None:
        self.url = f"http://{server.host}:{server.port}"
        self.runner_tokens = runners
        self.project = project
        self.wait = wait
        self.stop = threading.Event()
        self.tally = Tally()
        self.registered: list[tuple[Any, list[dict[str, Any]]]] = []
        self.turns: list[Any] = []  # one `agent.runner.turns.ParkingTurns` per runner

    def register(self) -> None:
        from agent.client.connection import ApiConnection

        def one(token: str) -> tuple[Any, list[dict[str, Any]]]:
            api = ApiConnection(self.url, token)
            body = {"host": socket.gethostname(), "version": "bench", "pid": os.getpid()}
            answer = api.request("POST", "/runners/register/", body=body)
            return api, list(answer["slots"])

        with ThreadPoolExecutor(8) as pool:
            self.registered = list(pool.map(one, self.runner_tokens))

    def start(self) -> None:
        """Each slot's first ask is spread over one wait, each runner's first beat over one heartbeat period:
        runners on a hundred machines start independently, so their deadlines do not fall together."""
        from agent.runner.turns import ParkingTurns

        for index, (_, slots) in enumerate(self.registered):
            delay = self.wait * index / len(self.registered)
            turns = ParkingTurns()
            self.turns.append(turns)
            for slot in slots:
                args = (slot["token"], delay, turns, int(slot["number"]))
                threading.Thread(target=self._slot, args=args, daemon=True).start()
        for index, registered in enumerate(self.registered):
            delay = HEARTBEAT_SECONDS * index / len(self.registered)
            threading.Thread(target=self._heartbeats, args=(registered, delay), daemon=True).start()

    def parked(self, expected: int) -> bool:
        with self.tally.lock:
            return self.tally.asked >= expected

    def _slot(self, token: str, delay: float, turns: Any, number: int) -> None:
        """One slot, as the daemon's: it takes its runner's parking turn (`agent.runner.turns`), claims with
        its own token and the wait, gives the turn back; the runner's other idle slots wait for the turn."""
        from agent.client.api import LeaseholdClient
        from agent.client.errors import LeaseholdError

        client = LeaseholdClient(self.url, token, max_retries=0)  # a refusal is counted, not retried unseen
        self.stop.wait(delay)
        while not self.stop.is_set():
            if turns.take([self.project], number, give_up=self.stop.is_set) is None:
                break
            asked = time.monotonic()
            with self.tally.lock:
                self.tally.asked += 1
            try:
                claim = client.claim_next(self.project, wait=self.wait)
            except LeaseholdError as error:
                if not self.stop.is_set():
                    self.tally.add(f"error {error.code}")
                self.stop.wait(MIN_CLAIM_INTERVAL_SECONDS)
                turns.give_back(self.project, number)
                continue
            if claim is None:
                self.tally.add("reask")
                self.stop.wait(max(0.0, MIN_CLAIM_INTERVAL_SECONDS - (time.monotonic() - asked)))
                turns.give_back(self.project, number)
                continue
            turns.give_back(self.project, number)
            with self.tally.lock:
                self.tally.claimed[claim.lease.task] = time.time()
            try:
                client.finish(claim.lease, "done", result_summary="bench: an idle slot's task")
                self.tally.add("finished")
            except LeaseholdError as error:
                self.tally.add(f"finish error {error.code}")
        client.close()

    def _heartbeats(self, registered: tuple[Any, list[dict[str, Any]]], delay: float) -> None:
        """One runner's heartbeat thread, as the daemon's: every `HEARTBEAT_SECONDS`, the slots whose report
        changed since the last answered beat — every slot (idle) on the first beat and after a failed one,
        none after that (the slots stay idle: a task is claimed and finished between two beats)."""
        from agent.client.errors import LeaseholdError

        api, slots = registered
        every = [{"number": s["number"], "state": "idle", "attempt_id": None, "task": None} for s in slots]
        acknowledged = False
        due = time.monotonic() + delay
        while not self.stop.wait(max(0.0, due - time.monotonic())):
            try:
                body = {"slots": [] if acknowledged else every}
                api.request("POST", "/runners/heartbeat/", body=body, retries=0, timeout=10.0)
                acknowledged = True
                self.tally.add("heartbeat")
            except LeaseholdError as error:
                acknowledged = False
                self.tally.add(f"heartbeat error {error.code}")
            due += HEARTBEAT_SECONDS


def idle_slots(target: Target, sizes: Any, *, workers: int) -> list[Row]:
    from bench.cycles import fresh_fleet, release_pool
    from bench.sizes import SMOKE as SMOKE_SIZES
    from ledger.actors import SYSTEM
    from runners.models import Runner
    from runners.services import runner_create

    shape = Shape(*SMOKE) if sizes is SMOKE_SIZES else FULL_SHAPE
    slots = shape.runners * shape.slots
    work = fresh_fleet("runners", agents=0, tasks=0)
    other = fresh_fleet("unrelated", agents=0, tasks=0)
    tokens = []
    for index in range(shape.runners):
        _, token = runner_create(
            name=f"bench-{work.project.slug}-{index:03d}", projects=[work.project], slots=shape.slots, actor=SYSTEM
        )
        tokens.append(token)
    first = Runner.objects.filter(name__startswith=f"bench-{work.project.slug}-").order_by("pk").first()
    assert first is not None
    floor = raw_floor(target, first, first.slot_rows.get(number=1).agent, work.project, shape.raw_repeats)
    release_pool()
    room = str((slots + 10) * workers)
    limits = {
        "LEASEHOLD_WAITERS_PER_AGENT": room,
        "LEASEHOLD_WAITERS_PER_ADDRESS": room,
        "GUNICORN_CMD_ARGS": f"--worker-connections {WORKER_CONNECTIONS}",
    }
    with _environment(**limits), http.serving(target, workers=workers) as server:
        time.sleep(2.0)
        with Meter(target, server) as empty:
            time.sleep(shape.empty_seconds)
        fleet = IdleFleet(server, tokens, project=work.project.slug, wait=shape.wait)
        try:
            fleet.register()
            fleet.start()
            deadline = time.monotonic() + shape.wait + 60
            while not fleet.parked(shape.runners) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3.0 if shape.wait < 30 else 8.0)  # the last ones have parked
            before = Counter(fleet.tally.counts)
            with Meter(target, server) as rest:
                time.sleep(shape.rest_seconds)
            in_rest = fleet.tally.counts - before
            rest_rate = per_second(rest.total, rest.elapsed)
            before = Counter(fleet.tally.counts)
            with Meter(target, server) as unrelated:
                events = _unrelated_events(other.project, shape.events)
                time.sleep(1.0)
            woken_for_nothing = len(fleet.tally.claimed)
            commits = {}
            with Meter(target, server) as handed:
                commits = _tasks(work.project, shape.tasks)
                finished_by = time.monotonic() + 30
                while fleet.tally.counts["finished"] < shape.tasks and time.monotonic() < finished_by:
                    time.sleep(0.05)
        finally:
            fleet.stop.set()
            for turns in fleet.turns:
                turns.wake_all()
    seen = [max(0.0, fleet.tally.claimed[key] - at) for key, at in commits.items() if key in fleet.tally.claimed]
    errors = sorted(name for name in fleet.tally.counts if "error" in name)
    floor_per_s = floor_rate(
        beats=in_rest["heartbeat"],
        reasks=in_rest["reask"],
        window=rest.elapsed,
        beat_cpu=floor["heartbeat"],
        reask_cpu=floor["reask"],
    )
    common = {"runners": shape.runners, "slots_per_runner": shape.slots, "wait_seconds": shape.wait}
    rows = [
        Row(
            database=target.vendor,
            workload=f"runners: {slots} idle slots at rest",
            mode="http",
            concurrency=slots,
            ops=in_rest["heartbeat"] + in_rest["reask"],
            seconds=round(rest.elapsed, 1),
            throughput=None,
            p50_ms=None,
            p99_ms=None,
            ratio=round(rest_rate / floor_per_s, 1) if floor_per_s else None,
            errors=[f"{name}: {count}" for name, count in fleet.tally.counts.items() if "error" in name],
            extra={
                **common,
                "server_pct_of_core": round(100 * rest_rate, 2),
                "web_pct_of_core": round(100 * per_second(rest.web, rest.elapsed), 2),
                "db_pct_of_core": round(100 * per_second(rest.db, rest.elapsed), 2),
                "empty_server_pct_of_core": round(100 * per_second(empty.total, empty.elapsed), 2),
                "slots_add_pct_of_core": round(100 * (rest_rate - per_second(empty.total, empty.elapsed)), 2),
                "heartbeats_in_window": in_rest["heartbeat"],
                "reasks_in_window": in_rest["reask"],
                "raw_floor_pct_of_core": round(100 * floor_per_s, 3),
                "budget_pct_of_core": 5,
            },
        ),
        Row(
            database=target.vendor,
            workload=f"runners: {slots} idle slots at rest",
            mode="raw",
            concurrency=1,
            ops=shape.raw_repeats * 2,
            seconds=0.0,
            throughput=None,
            p50_ms=None,
            p99_ms=None,
            extra={
                "heartbeat_cpu_ms": round(floor["heartbeat"] * 1000, 3),
                "heartbeat_statements": int(floor["heartbeat_statements"]),
                "empty_claim_cpu_ms": round(floor["reask"] * 1000, 3),
                "empty_claim_statements": int(floor["reask_statements"]),
                "floor_pct_of_core": round(100 * floor_per_s, 3),
            },
        ),
        Row(
            database=target.vendor,
            workload=f"runners: an unrelated event beside {slots} idle slots",
            mode="http",
            concurrency=slots,
            ops=events,
            seconds=round(unrelated.elapsed, 1),
            throughput=None,
            p50_ms=None,
            p99_ms=None,
            errors=[f"{woken_for_nothing} slots answered a claim"] if woken_for_nothing else [],
            extra={
                **common,
                "server_cpu_ms_per_event": beyond_rest_ms(unrelated.total, unrelated.elapsed, rest_rate, events),
            },
        ),
        Row(
            database=target.vendor,
            workload=f"runners: a task to one of {slots} idle slots",
            mode="http",
            concurrency=slots,
            ops=len(seen),
            seconds=round(handed.elapsed, 1),
            throughput=None,
            p50_ms=None if not seen else round(1000 * (percentile(seen, 0.5) or 0), 1),
            p99_ms=None if not seen else round(1000 * (percentile(seen, 0.99) or 0), 1),
            errors=[] if len(seen) == shape.tasks else [f"{shape.tasks - len(seen)} tasks not handed out in time"],
            extra={
                **common,
                "server_cpu_ms_per_task": beyond_rest_ms(handed.total, handed.elapsed, rest_rate, len(seen)),
                "note": "wake, claim, finish done, park again",
                "answer_errors": errors,
            },
        ),
    ]
    return rows


def _unrelated_events(project: Any, count: int) -> int:
    """Tasks created in a project no runner serves, `EVENT_EVERY_SECONDS` apart; returns the events appended."""
    from ledger.actors import SYSTEM
    from ledger.models import Event
    from ledger.services import task_create

    last = Event.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for index in range(count):
        task_create(project=project, title=f"Unrelated task {index}", actor=SYSTEM, status="ready")
        time.sleep(EVENT_EVERY_SECONDS)
    return Event.objects.filter(pk__gt=last).count()


def _tasks(project: Any, count: int) -> dict[str, float]:
    from bench.claim_waiters import _make_tasks

    made: dict[str, float] = _make_tasks(project, count)()
    return made


def runners(target: Target, sizes: Any, *, workers: int) -> tuple[list[Row], dict[str, Any]]:
    from bench.runner_cpu import runner_cpu

    rows = idle_slots(target, sizes, workers=workers)
    rows += runner_cpu(target, sizes)
    return rows, {}
