"""SPEC §25: server CPU per wake with many agents waiting on claims/next (`python -m bench run --only claimwait`).

One production server (`manage.py serve --no-cluster`, the parking worker) and `WAITERS` threads in this
process, each holding `POST /api/v1/claims/next/ {"wait": 30}` and asking again when answered (a fleet's
idle agents). Then `TASKS` ready tasks are created one at a time, `TASK_EVERY_SECONDS` apart. Each commit
should wake one waiter (part two measured the changes feed: every event woke every waiting agent, 16 ms of
server CPU per wake, 300 waiters saturated a server). The row reports the server's CPU per task handed out
(beyond its CPU at rest with the waiters parked), the latency from a task's commit to its claim's answer,
and how many answers were anything but a claim (a waiter woken for nothing answers nothing: it parks again,
so that count stays 0 until the deadlines). Each worker process keeps its own waiters: a commit wakes
one waiter in each process that has some (at most `workers` wakes, never the herd).
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from typing import Any

from bench import http
from bench.environment import Target
from bench.harness import percentile
from bench.proc_cpu import process_cpu_seconds
from bench.results import Row

WAITERS = 300
TASKS = 30
TASK_EVERY_SECONDS = 0.3
WAIT_SECONDS = 30


@contextmanager
def _environment(**values: str) -> Any:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def claim_waiters(target: Target, sizes: Any, *, workers: int) -> tuple[list[Row], dict[str, Any]]:
    from bench import cycles
    from bench.sizes import SMOKE

    smoke = sizes is SMOKE
    count, tasks = (40, 5) if smoke else (WAITERS, TASKS)
    fleet = cycles.fresh_fleet("claimwait", agents=0, tasks=0)
    ((_, token),) = http.create_agents(fleet.project, 1, prefix=f"{fleet.project.slug}-w")
    claimed: dict[str, float] = {}
    other: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()
    # One token and one address for every waiter; each worker process admits its share of a limit.
    room = str((count + 10) * workers)
    limits = {"LEASEHOLD_WAITERS_PER_AGENT": room, "LEASEHOLD_WAITERS_PER_ADDRESS": room}
    with _environment(**limits), http.serving(target, workers=workers) as server:

        def waiter() -> None:
            body = {"project": fleet.project.slug, "wait": WAIT_SECONDS}
            while not stop.is_set():
                try:
                    status, payload = server.call("POST", "/api/v1/claims/next/", token=token, body=body)
                except OSError:
                    if not stop.is_set():  # the server going away at the end is not an answer
                        with lock:
                            other.append(0)
                    return
                arrived = time.time()
                with lock:
                    if status == 201:
                        claimed[json.loads(payload)["task"]["key"]] = arrived
                    elif not stop.is_set():
                        other.append(status)
                if status != 201:
                    time.sleep(0.5)  # a refusal (e.g. RATE_LIMITED) is counted, not hammered

        threads = [threading.Thread(target=waiter, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
        time.sleep(3.0 if smoke else 8.0)  # every waiter has run once and parked
        rest_before = process_cpu_seconds(server.pid)
        time.sleep(3.0)
        at_rest = (process_cpu_seconds(server.pid) - rest_before) / 3.0
        made = _make_tasks(fleet.project, tasks)
        started = time.monotonic()
        cpu_before = process_cpu_seconds(server.pid)
        deadline = time.monotonic() + 20
        commits = made()
        while len(claimed) < tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        cpu = process_cpu_seconds(server.pid) - cpu_before
        stop.set()
    seen = [max(0.0, claimed[key] - at) for key, at in commits.items() if key in claimed]
    beyond_rest = max(0.0, cpu - at_rest * elapsed)
    p50, p99 = percentile(seen, 0.5), percentile(seen, 0.99)
    return [
        Row(
            database=target.vendor,
            workload=f"claims/next wait: a task to one of {count} waiters",
            mode="http",
            concurrency=count,
            ops=len(seen),
            seconds=round(elapsed, 2),
            throughput=None,
            p50_ms=None if p50 is None else round(p50 * 1000, 1),
            p99_ms=None if p99 is None else round(p99 * 1000, 1),
            errors=[] if len(seen) == tasks else [f"{tasks - len(seen)} tasks not handed out in time"],
            extra={
                "server_cpu_ms_per_task": round(beyond_rest / max(1, len(seen)) * 1000, 1),
                "server_cpu_at_rest_s_per_s": round(at_rest, 3),
                "answers_other_than_a_claim": len(other),
                "other_statuses": sorted(set(other)),
            },
        )
    ], {}


def _make_tasks(project: Any, count: int) -> Any:
    """A callable that creates `count` ready tasks, `TASK_EVERY_SECONDS` apart; returns {key: commit time}."""

    def make() -> dict[str, float]:
        from ledger.actors import SYSTEM
        from ledger.services import task_create

        commits: dict[str, float] = {}
        for index in range(count):
            task = task_create(project=project, title=f"Waited-for task {index}", actor=SYSTEM, status="ready")
            commits[task.key] = time.time()  # autocommit: committed on return
            time.sleep(TASK_EVERY_SECONDS)
        return commits

    return make
