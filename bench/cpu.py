"""`--only cpu` (issue 20, SPEC §20): process CPU per full cycle and per operation, at one agent.

One agent in one thread of the bench's child process repeats the full cycle —
claim-next, renew, checkpoint note, finish (done) — through the service layer,
and `time.process_time()` is read around each operation, after warm-up cycles
(caches, prepared state and first-call imports are not what an agent pays).
The raw replay of the same cycle's captured statements (`bench.ops`) runs in
the same run as the reference: its CPU is the driver's and the loop's, the
floor under the service layer.

Then a profiled pass: one `cProfile.Profile` per operation, enabled only
around that operation, saved beside the results as `cpu-<vendor>-<op>.prof`
(load with `pstats`) and `cpu-<vendor>-<op>.txt` (the top functions by
cumulative time), timed by process CPU (`time.process_time`, as the rows are),
in `LEASEHOLD_BENCH_PROFILE_DIR` (default `bench/results`).

Process CPU is this process's only: the database server's CPU (PostgreSQL) is
not in it; SQLite runs in the process, so its engine is.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

from bench import ops
from bench.cycles import capture_ops, fresh_fleet, release_pool
from bench.environment import Target
from bench.harness import percentile
from bench.replay import RawConnection
from bench.results import Row
from bench.sizes import Sizes

WARMUP_CYCLES = 30
CYCLES = 300
SMOKE_CYCLES = 30
PROFILED_CYCLES = 100
PROFILE_LINES = 30
WORKLOAD = "cpu: full cycle at 1 agent"


def _specs() -> list[ops.OpSpec]:
    return [ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.finish_spec("done")]


def _service_cycle(holder: ops.Holder, specs: list[ops.OpSpec], spent: dict[str, list[float]]) -> float:
    """One cycle; the CPU seconds of each operation appended to `spent`; returns the cycle's."""
    total = 0.0
    for spec in specs:
        began = time.process_time()
        result = spec.call(holder)
        used = time.process_time() - began
        if result is None:
            raise RuntimeError(f"{spec.name} found nothing: the cpu workload ran out of tasks")
        spent[spec.name].append(used)
        total += used
    return total


def _row(vendor: str, mode: str, per_cycle: list[float], per_op: dict[str, list[float]], **extra: Any) -> Row:
    seconds = sum(per_cycle)
    means = {f"{name}_cpu_ms": round(statistics.fmean(values) * 1000, 3) for name, values in per_op.items() if values}
    return Row(
        database=vendor,
        workload=WORKLOAD,
        mode=mode,
        concurrency=1,
        ops=len(per_cycle),
        seconds=round(seconds, 3),
        throughput=round(len(per_cycle) / seconds, 1) if seconds else None,
        p50_ms=round(1000 * (percentile(per_cycle, 0.50) or 0), 3),
        p99_ms=round(1000 * (percentile(per_cycle, 0.99) or 0), 3),
        extra={"cpu_ms_per_cycle": round(1000 * statistics.fmean(per_cycle), 3), **means, **extra},
    )


def _profile(vendor: str, holder: ops.Holder, specs: list[ops.OpSpec], cycles: int) -> dict[str, str]:
    """A profiled pass; writes one .prof and one .txt per operation and returns their paths."""
    folder = Path(os.environ.get("LEASEHOLD_BENCH_PROFILE_DIR", "bench/results"))
    folder.mkdir(parents=True, exist_ok=True)
    # Timed by process CPU, as the row is: waiting for PostgreSQL's answer is not the process's cost.
    profilers = {spec.name: cProfile.Profile(time.process_time) for spec in specs}
    for _ in range(cycles):
        for spec in specs:
            profiler = profilers[spec.name]
            profiler.enable()
            result = spec.call(holder)
            profiler.disable()
            if result is None:
                raise RuntimeError(f"{spec.name} found nothing in the profiled pass")
    written: dict[str, str] = {}
    for name, profiler in profilers.items():
        stem = folder / f"cpu-{vendor}-{name}"
        profiler.dump_stats(f"{stem}.prof")
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(PROFILE_LINES)
        Path(f"{stem}.txt").write_text(text.getvalue())
        written[name] = f"{stem}.prof"
    return written


def _raw_cycles(target: Target, fleet: Any, captured: list[ops.CapturedOp], cycles: int) -> tuple[list[float], dict]:
    raw = RawConnection(target.vendor, target.dsn)
    agent = ops.raw_agent(raw, agent=fleet.agents[0], project=fleet.project)
    per_cycle: list[float] = []
    per_op: dict[str, list[float]] = {op.spec.name: [] for op in captured}
    try:
        for number in range(WARMUP_CYCLES + cycles):
            total = 0.0
            for op in captured:
                began = time.process_time()
                outcome = ops.raw_op(agent, op)
                used = time.process_time() - began
                if outcome != "ok":
                    raise RuntimeError(f"the raw replay of {op.spec.name} stopped: {outcome}")
                if number >= WARMUP_CYCLES:
                    per_op[op.spec.name].append(used)
                total += used
            if number >= WARMUP_CYCLES:
                per_cycle.append(total)
    finally:
        raw.close()
    return per_cycle, per_op


def cpu(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    smoke = sizes.w1_tasks < 10_000
    cycles = SMOKE_CYCLES if smoke else CYCLES
    profiled = SMOKE_CYCLES if smoke else PROFILED_CYCLES
    specs = _specs()
    fleet = fresh_fleet("cpu", agents=1, tasks=WARMUP_CYCLES + cycles + profiled + 10)
    holder = ops.Holder(agent=fleet.agents[0], project=fleet.project)
    spent: dict[str, list[float]] = {spec.name: [] for spec in specs}
    per_cycle: list[float] = []
    for number in range(WARMUP_CYCLES + cycles):
        warm = {spec.name: [] for spec in specs} if number < WARMUP_CYCLES else spent
        used = _service_cycle(holder, specs, warm)
        if number >= WARMUP_CYCLES:
            per_cycle.append(used)
    profiles = _profile(target.vendor, holder, specs, profiled)
    service = _row(target.vendor, "service", per_cycle, spent, profiles=", ".join(profiles.values()))

    captured = capture_ops("cpu", specs)
    raw_fleet = fresh_fleet("cpu-raw", agents=1, tasks=WARMUP_CYCLES + cycles + 10)
    release_pool()
    raw_per_cycle, raw_per_op = _raw_cycles(target, raw_fleet, captured, cycles)
    raw = _row(target.vendor, "raw", raw_per_cycle, raw_per_op)
    if raw.extra["cpu_ms_per_cycle"]:
        # For CPU, the ratio is CPU over the raw replay's CPU (lower is better; the budget is absolute).
        service.ratio = round(service.extra["cpu_ms_per_cycle"] / raw.extra["cpu_ms_per_cycle"], 2)
    service.extra["budget_ms"] = 3
    return [service, raw], {}
