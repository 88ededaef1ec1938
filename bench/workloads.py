"""The workloads W1, W2, W3 (on threads and in processes) and bytes, each through the services and as a raw replay.

Every workload gets its own project, so runs do not see each other's tasks;
the raw reference of a workload replays the statements captured from the
service layer in the same run, against an identical project of its own.
The sizes are in `bench.sizes`, the agent loop in `bench.cycles`, and W5 (the sweep) in `bench.sweep`.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from bench import data, ops
from bench.cycles import CYCLE, capture_ops, fresh_fleet, release_pool, run_raw, run_service
from bench.environment import Target
from bench.harness import RunResult, percentile
from bench.processes import run_processes
from bench.replay import RawConnection
from bench.results import Row, row_from_run, set_ratio
from bench.sizes import Sizes

# --- W1: uncontended claim-next on a big ready queue -------------------------------------------


def w1(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    captured = capture_ops("w1", [ops.CLAIM_NEXT])
    name = f"W1 claim-next, {sizes.w1_tasks:,} ready"
    service_fleet = fresh_fleet("w1s", agents=1, tasks=sizes.w1_tasks)
    raw_fleet = fresh_fleet("w1r", agents=1, tasks=sizes.w1_tasks)
    data.analyze()
    service = run_service(service_fleet, [ops.CLAIM_NEXT], threads=1, seconds=sizes.w1_seconds, hot=False)
    raw = run_raw(target, raw_fleet, captured, threads=1, seconds=sizes.w1_seconds, hot=False)
    rows = [
        row_from_run(target.vendor, name, "service", service, kind="claim", **_drift(service)),
        row_from_run(target.vendor, name, "raw", raw, kind="claim", **_drift(raw)),
    ]
    set_ratio(rows[0], rows[1])
    return rows, {"w1_claim": _logged(captured)}


def _drift(run: RunResult) -> dict[str, Any]:
    """Median claim latency over the first and the last tenth of the run: claim-next walks past held tasks."""
    samples = run.latencies.get("claim", [])
    if len(samples) < 20:
        return {}
    tenth = len(samples) // 10
    first = sorted(samples[:tenth])[tenth // 2]
    last = sorted(samples[-tenth:])[tenth // 2]
    return {"p50_first_10pct_ms": round(first * 1000, 2), "p50_last_10pct_ms": round(last * 1000, 2)}


def _op_medians(run: RunResult) -> dict[str, Any]:
    """Median latency (ms) of each operation of the cycle, claim included; kept in the JSON, not the table."""
    medians = {}
    for kind, samples in run.latencies.items():
        if kind == "claim" or kind.startswith("op:"):
            median = percentile(samples, 0.5)
            medians[kind.removeprefix("op:")] = None if median is None else round(median * 1000, 2)
    return {"_op_p50_ms": medians}


def _logged(captured: list[ops.CapturedOp]) -> dict[str, Any]:
    return {op.spec.name: {"statements": len(op.trace.describe()), "logged": op.logged} for op in captured}


# --- W2: hot race ----------------------------------------------------------------------------


def w2(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    specs = [ops.CLAIM_NEXT, ops.FINISH_HANDOFF]
    captured = capture_ops("w2", specs)
    name = f"W2 hot race, {sizes.w2_tasks} tasks"
    service_fleet = fresh_fleet("w2s", agents=sizes.w2_agents, tasks=sizes.w2_tasks)
    raw_fleet = fresh_fleet("w2r", agents=sizes.w2_agents, tasks=sizes.w2_tasks)
    service = run_service(service_fleet, specs, threads=sizes.w2_agents, seconds=sizes.w2_seconds, hot=True)
    raw = run_raw(target, raw_fleet, captured, threads=sizes.w2_agents, seconds=sizes.w2_seconds, hot=True)
    rows = [
        row_from_run(
            target.vendor,
            name,
            "service",
            service,
            kind="claim",
            claims_won=service.count("cycle"),
            **_op_medians(service),
        ),
        row_from_run(target.vendor, name, "raw", raw, kind="claim", claims_won=raw.count("cycle"), **_op_medians(raw)),
    ]
    set_ratio(rows[0], rows[1])
    rows.append(w2_processes(target, sizes, name=name))
    set_ratio(rows[-1], rows[1])
    return rows, {"w2": _logged(captured)}


def w2_processes(target: Target, sizes: Sizes, *, name: str) -> Row:
    """The hot race with its agents spread over processes, as a fleet's are: the GIL of one process is out of it."""
    fleet = fresh_fleet("w2p", agents=sizes.w2_agents, tasks=sizes.w2_tasks)
    release_pool()
    return run_processes(
        target,
        fleet,
        processes=sizes.w2_processes,
        threads=sizes.w2_agents // sizes.w2_processes,
        seconds=sizes.w2_seconds,
        hot=True,
        workload=f"{name}, {sizes.w2_processes} processes",
    )


# --- W3: full cycle at several concurrencies ------------------------------------------------------


def w3(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    captured = capture_ops("w3", CYCLE)
    rows: list[Row] = []
    for level in sizes.w3_levels:
        name = "W3 full cycle"
        service_fleet = fresh_fleet("w3s", agents=level, tasks=sizes.w3_tasks)
        raw_fleet = fresh_fleet("w3r", agents=level, tasks=sizes.w3_tasks)
        data.analyze()
        service = run_service(service_fleet, CYCLE, threads=level, seconds=sizes.w3_seconds, hot=False)
        raw = run_raw(target, raw_fleet, captured, threads=level, seconds=sizes.w3_seconds, hot=False)
        service_row = row_from_run(target.vendor, name, "service", service, kind="cycle", **_op_medians(service))
        raw_row = row_from_run(target.vendor, name, "raw", raw, kind="cycle", **_op_medians(raw))
        set_ratio(service_row, raw_row)
        rows += [service_row, raw_row]
    return rows, {"w3_cycle": _logged(captured)}


# --- bytes: the work context of a task with a huge description ------------------------------------------


def context_bytes(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    from bench.capture import capture, symbolize
    from leases.context import encoded_size, work_context
    from ledger.models import Task

    fleet = fresh_fleet("ctx", agents=1, tasks=1, body_bytes=sizes.context_description_bytes)
    holder = ops.Holder(agent=fleet.agents[0], project=fleet.project)
    ops.CLAIM_NEXT.call(holder)
    ops.NOTE.call(holder)
    task = Task.objects.get(pk=holder.grant.task.pk)
    adapt = ops.datetime_adapter()
    work_context(task=task, now=datetime.now(UTC))  # warm
    moment = datetime.now(UTC)
    context, trace = capture(lambda: work_context(task=task, now=moment))
    replay = symbolize(
        "work_context",
        trace,
        symbols={"task_id": task.pk, "now": adapt(moment), "attempt_id": holder.grant.attempt.pk},
        results={},
    )
    returned = encoded_size(context)
    samples = []
    for _ in range(sizes.context_calls):
        started = time.perf_counter()
        work_context(task=task, now=datetime.now(UTC))
        samples.append(time.perf_counter() - started)
    release_pool()
    raw = RawConnection(target.vendor, target.dsn)
    raw_samples = []
    try:
        for _ in range(sizes.context_calls):
            started = time.perf_counter()
            raw.run(
                replay,
                {
                    "task_id": task.pk,
                    "now": raw.adapt_datetime(datetime.now(UTC)),
                    "attempt_id": holder.grant.attempt.pk,
                },
            )
            raw_samples.append(time.perf_counter() - started)
        if target.vendor == "postgresql":
            raw.conn.rollback()
    finally:
        raw.close()
    name = f"bytes: context, {sizes.context_description_bytes // 1000} KB description"
    service_run = RunResult(threads=1, seconds=sum(samples), latencies={"call": samples}, outcomes=Counter(), errors=[])
    raw_run = RunResult(
        threads=1, seconds=sum(raw_samples), latencies={"call": raw_samples}, outcomes=Counter(), errors=[]
    )
    service_row = row_from_run(
        target.vendor,
        name,
        "service",
        service_run,
        kind="call",
        bytes=returned,
        truncated=",".join(context["truncated"]),
    )
    raw_row = row_from_run(target.vendor, name, "raw", raw_run, kind="call", statements=len(replay.describe()))
    set_ratio(service_row, raw_row)
    if returned > _context_limit():
        service_row.errors.append(f"context is {returned} bytes, over the {_context_limit()} limit")
    return [service_row, raw_row], {"context": trace.logged}


def _context_limit() -> int:
    from django.conf import settings

    return int(settings.LEASEHOLD_CONTEXT_MAX_BYTES)


# --- W3 from several processes ---------------------------------------------------------------------


def w3_processes(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    agents = sizes.sqlite_processes * sizes.sqlite_threads
    fleet = fresh_fleet("w3p", agents=agents, tasks=sizes.w3_tasks)
    data.analyze()
    release_pool()
    row = run_processes(
        target, fleet, processes=sizes.sqlite_processes, threads=sizes.sqlite_threads, seconds=sizes.w3_seconds
    )
    return [row], {}
