"""W2 and W3 through the service layer from several processes at once (e.g. 16 agents in 4 processes).

Each process sets Django up for the same database and runs its agents as
threads; they start together at an agreed wall-clock instant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import data, ops
from bench.cycles import CYCLE, close_django_connections, service_cycles
from bench.environment import Target
from bench.harness import percentile, run_threads
from bench.results import Row

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def run_processes(
    target: Target,
    fleet: data.Fleet,
    *,
    processes: int,
    threads: int,
    seconds: float,
    hot: bool = False,
    workload: str = "",
) -> Row:
    """Start `processes` children with `threads` agents each; one row for the lot.

    W3's full cycles by default; `hot`: W2's claim-next + handoff, reporting every claim call.
    """
    env = {**os.environ, **target.env, "PYTHONPATH": str(PROJECT_ROOT)}
    start_at = time.time() + 4.0  # Django start-up in each child takes a second or two
    children = []
    for index in range(processes):
        agents = fleet.agents[index * threads : (index + 1) * threads]
        command = [
            sys.executable,
            "-m",
            "bench",
            "agents",
            "--project",
            str(fleet.project.pk),
            "--agents",
            ",".join(str(agent.pk) for agent in agents),
            "--seconds",
            str(seconds),
            "--start-at",
            str(start_at),
            *(["--hot"] if hot else []),
        ]
        children.append(
            subprocess.Popen(
                command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    for child in children:
        out, err = child.communicate(timeout=seconds + 300)
        if child.returncode != 0:
            errors.append(f"agent process exited {child.returncode}: {err.strip().splitlines()[-1:]}")
            continue
        results.append(json.loads(out.strip().splitlines()[-1]))
    kind = "claim" if hot else "cycle"
    samples = [sample for result in results for sample in result[kind]]
    won = sum(len(result["cycle"]) for result in results)
    elapsed = max((result["seconds"] for result in results), default=0.0)
    outcomes: dict[str, int] = {}
    for result in results:
        for key, value in result["outcomes"].items():
            outcomes[key] = outcomes.get(key, 0) + value
        errors.extend(result["errors"])
    storage_busy = sum(1 for error in errors if "STORAGE_BUSY" in error)
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    extra: dict[str, Any] = {"storage_busy": storage_busy, "processes": processes}
    if hot:
        extra["claims_won"] = won
    return Row(
        database=target.vendor,
        workload=workload or f"W3 full cycle, {processes} processes",
        mode="service",
        concurrency=processes * threads,
        ops=len(samples),
        seconds=round(elapsed, 3),
        throughput=round(len(samples) / elapsed, 1) if elapsed else None,
        p50_ms=None if p50 is None else round(p50 * 1000, 2),
        p99_ms=None if p99 is None else round(p99 * 1000, 2),
        outcomes=outcomes,
        errors=errors[:5],
        extra=extra,
    )


@dataclass(frozen=True)
class SweepOutcome:
    expired: int
    batches: int
    worst_batch_seconds: float
    seconds: float
    error: str = ""


def run_sweep_process(target: Target, *, batch_size: int | None) -> SweepOutcome:
    """`sweep_expired` in a child process against `target`; its report and wall time."""
    env = {**os.environ, **target.env, "PYTHONPATH": str(PROJECT_ROOT)}
    command = [sys.executable, "-m", "bench", "sweep"]
    if batch_size:
        command += ["--batch-size", str(batch_size)]
    child = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        return SweepOutcome(0, 0, 0.0, 0.0, error=f"sweep exited {child.returncode}: {child.stderr[-300:]}")
    return SweepOutcome(**json.loads(child.stdout.strip().splitlines()[-1]))


def sweep_main(batch_size: int | None) -> None:
    """Child side of `run_sweep_process`: one JSON line with the report and the wall time."""
    import django

    django.setup()
    from leases.services import sweep_expired

    started = time.perf_counter()
    report = sweep_expired(batch_size=batch_size) if batch_size else sweep_expired()
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "expired": report.expired,
                "batches": report.batches,
                "worst_batch_seconds": report.worst_batch_seconds,
                "seconds": seconds,
            }
        )
    )


def agents_main(project_id: int, agent_ids: list[int], seconds: float, start_at: float, *, hot: bool = False) -> None:
    """Child side: Django is configured from the environment; print one JSON line of results."""
    import django

    django.setup()
    from ledger.models import Agent, Project

    project = Project.objects.get(pk=project_id)
    agents = list(Agent.objects.filter(pk__in=agent_ids).order_by("pk"))
    close_django_connections()
    fleet = data.Fleet(project=project, agents=agents)
    time.sleep(max(0.0, start_at - time.time()))
    run = run_threads(
        len(agents),
        service_cycles(fleet, [ops.CLAIM_NEXT, ops.FINISH_HANDOFF] if hot else CYCLE, stop_when_empty=not hot),
        duration=seconds,
        on_exit=close_django_connections,
    )
    print(
        json.dumps(
            {
                "seconds": run.seconds,
                "cycle": run.latencies.get("cycle", []),
                "claim": run.latencies.get("claim", []),
                "outcomes": dict(run.outcomes),
                "errors": run.errors,
            }
        )
    )
