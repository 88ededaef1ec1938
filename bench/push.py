"""SPEC §18's budgets: one /metrics scrape at 100,000 tasks and 1,000,000 events (≤ 50 ms), and how soon a
waiter of the changes feed sees an event after its commit (p99 ≤ 100 ms on PostgreSQL, ≤ 500 ms on SQLite).

- `push-metrics`: the tasks and events are bulk-loaded (events by COPY /
  executemany, so the event table's triggers run as on any insert); the first
  scrape advances the running event tally over the whole million (reported
  apart, once per database's life), then each measured scrape renders the
  whole text through `FleetCollector` after a handful of new events.
- `push-wait`: waiter threads, each subscribed through the process's event
  watcher (LISTEN/NOTIFY on PostgreSQL, the 50 ms poll on SQLite) and then
  re-reading the feed with `changes_since`, as a parked request does; a
  writer thread appends one event at a time and records its commit instant.
  Latency = commit → the waiter has read the event.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import data
from bench.environment import Target
from bench.results import Row

EVENT_COLUMNS = ("project_id", "task_id", "attempt_id", "type", "severity", "payload", "created_at")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def _bulk_events(project_id: int, first_task: int, last_task: int, count: int, now: datetime) -> None:
    from ledger.models import EventType

    event_mix = (
        (EventType.TASK_CREATED, 20),
        (EventType.ATTEMPT_CLAIMED, 25),
        (EventType.NOTE_ADDED, 25),
        (EventType.ATTEMPT_FINISHED, 20),
        (EventType.ATTEMPT_EXPIRED, 4),
        (EventType.TASK_CONTESTED, 3),
        (EventType.FINDING_OPENED, 3),
    )
    kinds = [kind for kind, weight in event_mix for _ in range(weight)]
    rng = random.Random(18)

    def rows() -> Iterator[tuple[Any, ...]]:
        for index in range(count):
            kind = kinds[index % len(kinds)]
            payload = json.dumps({"status": "completed"} if kind == EventType.ATTEMPT_FINISHED else {})
            severity = "warn" if kind in (EventType.TASK_CONTESTED, EventType.FINDING_OPENED) else "info"
            yield (
                project_id,
                rng.randint(first_task, last_task),
                None,
                kind,
                severity,
                payload,
                now - timedelta(seconds=count - index),
            )

    data._copy_rows("ledger_event", EVENT_COLUMNS, rows())


def metrics(target: Target, sizes: Any, *, smoke: bool) -> list[Row]:
    from prometheus_client import generate_latest

    from insight.prometheus import fleet_registry
    from ledger.actors import SYSTEM
    from ledger.models import EventType
    from ledger.services import event_append

    tasks, events = (5_000, 50_000) if smoke else (100_000, 1_000_000)
    now = datetime.now(UTC)
    fleet = data.make_project("push", agents=1)
    first, last = data.bulk_ready_tasks(fleet.project, tasks, since=now - timedelta(hours=1))
    data.bulk_history(
        fleet.project,
        fleet.agents[0],
        first_task=first,
        last_task=first + tasks // 5,
        finished_per_task=2,
        lapsed=False,
        now=now,
    )
    _bulk_events(fleet.project.pk, first, last, events, now)
    data.vacuum_analyze()

    started = time.perf_counter()
    body = generate_latest(fleet_registry())
    first_scrape = time.perf_counter() - started
    timings: list[float] = []
    for _ in range(30):
        for _ in range(5):
            event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=datetime.now(UTC), project=fleet.project)
        started = time.perf_counter()
        body = generate_latest(fleet_registry())
        timings.append(time.perf_counter() - started)
    parts = _part_timings()
    return [
        Row(
            database=target.vendor,
            workload=f"push: /metrics scrape at {tasks:,} tasks, {events:,} events",
            mode="service",
            concurrency=1,
            ops=len(timings),
            seconds=round(sum(timings), 3),
            throughput=None,
            p50_ms=round(statistics.median(timings) * 1000, 2),
            p99_ms=round(_percentile(timings, 0.99) * 1000, 2),
            extra={"first_scrape_ms": round(first_scrape * 1000, 1), "bytes": len(body), "budget_ms": 50, **parts},
        )
    ]


def _part_timings() -> dict[str, float]:
    """Median ms of each reader of the collector, to show where a scrape's time goes."""
    from insight import prometheus
    from ledger import clock
    from ledger.models import Project

    now = clock.now()
    slugs = dict(Project.objects.values_list("id", "slug"))
    readers = {
        "tasks": lambda: prometheus._tasks(now, slugs),
        "leases": lambda: list(prometheus._leases(now)),
        "advance_tallies": prometheus.advance_tallies,
        "counters": lambda: list(prometheus._counters(prometheus.advance_tallies())),
        "findings": prometheus._findings,
        "queue_wait": lambda: prometheus._queue_wait(now, slugs),
        "deliveries": prometheus._deliveries,
        "reconciliation": lambda: list(prometheus._last_reconciliation()),
        "spend": lambda: list(prometheus._spend(now, slugs)),
        "jobs": lambda: list(prometheus._jobs(now)),
    }
    timings = {}
    for name, reader in readers.items():
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            reader()
            runs.append(time.perf_counter() - started)
        timings[f"{name}_ms"] = round(statistics.median(runs) * 1000, 2)
    return timings


def wait_latency(target: Target, sizes: Any, *, smoke: bool) -> list[Row]:
    from django.db import connections

    from ledger.actors import SYSTEM
    from ledger.models import EventType
    from ledger.selectors import changes_and_position, feed_position
    from ledger.services import event_append
    from push.waiting import event_watcher

    waiters, rounds = (5, 20) if smoke else (20, 100)
    fleet = data.make_project("pushwait", agents=waiters)
    projects = frozenset({fleet.project.pk})
    committed: dict[int, float] = {}
    arrivals: list[tuple[int, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Barrier(waiters + 1)

    def waiter(agent: Any) -> None:
        position = feed_position()
        ready.wait()
        try:
            while not stop.is_set():
                woken = threading.Event()
                unsubscribe = event_watcher().subscribe(since=position, projects=projects, wake=woken.set)
                woken.wait(2.0)
                unsubscribe()
                rows, _, reread = changes_and_position(agent=agent, since=position, limit=200)
                arrived = time.perf_counter()
                with lock:
                    arrivals.extend((row["id"], arrived) for row in rows)
                position = max([reread, *(row["id"] for row in rows)])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=waiter, args=(agent,)) for agent in fleet.agents]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.5)
    for _ in range(rounds):
        event = event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=datetime.now(UTC), project=fleet.project)
        with lock:
            committed[event.pk] = time.perf_counter()  # autocommit: committed on return
        time.sleep(0.1)
    time.sleep(1.0)
    stop.set()
    for _ in range(3):  # wake the waiters so that they see `stop`
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=datetime.now(UTC), project=fleet.project)
    for thread in threads:
        thread.join(timeout=10)
    event_watcher().stop()
    # Matched afterwards: a waiter can read an event before the writer has noted its commit time (latency ~0).
    seen = [max(0.0, arrived - committed[event_id]) for event_id, arrived in arrivals if event_id in committed]
    budget = 100 if target.vendor == "postgresql" else 500
    return [
        Row(
            database=target.vendor,
            workload=f"push: waiter sees a commit ({waiters} waiters)",
            mode="service",
            concurrency=waiters,
            ops=len(seen),
            seconds=round(sum(seen), 3),
            throughput=None,
            p50_ms=round(statistics.median(seen) * 1000, 2) if seen else None,
            p99_ms=round(_percentile(seen, 0.99) * 1000, 2) if seen else None,
            errors=[] if len(seen) >= waiters * rounds else [f"{waiters * rounds - len(seen)} sightings missing"],
            extra={"budget_p99_ms": budget},
        )
    ]


def push(target: Target, sizes: Any) -> tuple[list[Row], dict[str, Any]]:
    from bench.sizes import SMOKE

    smoke = sizes is SMOKE
    return metrics(target, sizes, smoke=smoke) + wait_latency(target, sizes, smoke=smoke), {}
