"""What every in-process workload is made of: fresh projects, the agent loop through the services and
its raw replay, and running them on threads.

The agent loop lives here, not beside a workload, because the child processes of `bench.processes`
run the same loop as the threads of `bench.workloads` and `bench.sweep`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from bench import data, ops
from bench.environment import Target
from bench.harness import Recorder, RunResult, run_threads
from bench.replay import RawConnection

_slugs = iter(range(1, 1_000_000))

# An agent that found nothing (or lost the race) waits this long before asking again, in every mode
# (service, raw, HTTP): agents poll, they do not spin. Without it 64 threads of one process spend
# the run handing the GIL to each other instead of measuring claims.
IDLE_BACKOFF_SECONDS = 0.002


def fresh_fleet(name: str, *, agents: int, tasks: int, body_bytes: int = 0) -> data.Fleet:
    fleet = data.make_project(f"{name}-{next(_slugs)}", agents=agents)
    if tasks:
        data.bulk_ready_tasks(fleet.project, tasks, body_bytes=body_bytes)
    return fleet


def close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


def release_pool() -> None:
    """Close every pooled connection (PostgreSQL's max_connections is shared with the raw loops)."""
    from django.db import connection

    connection.close()
    close_pool = getattr(connection, "close_pool", None)
    if close_pool is not None:
        close_pool()


def capture_ops(name: str, specs: list[ops.OpSpec]) -> list[ops.CapturedOp]:
    """Capture one warm cycle of `specs` on a scratch project of its own."""
    fleet = fresh_fleet(f"capture-{name}", agents=1, tasks=4)
    holder = ops.Holder(agent=fleet.agents[0], project=fleet.project)
    for spec in specs:  # warm: first-call work (caches, prepared state) is not what we replay
        spec.call(holder)
    captured = ops.capture_cycle(holder, specs)
    if captured is None:
        raise RuntimeError(f"capture of {name} found nothing to claim")
    return captured


# The full cycle of W3, of W5's probe and of the agent processes.
CYCLE = [ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.FINISH_DONE]


# --- thread bodies ------------------------------------------------------------------------


def service_cycles(fleet: data.Fleet, specs: list[ops.OpSpec], *, stop_when_empty: bool) -> Callable[..., None]:
    """Each thread: claim-next, then the holder calls of `specs[1:]`, until the deadline."""
    from core.errors import LedgerError, TaskTaken

    def body(index: int, recorder: Recorder, deadline: float) -> None:
        holder = ops.Holder(agent=fleet.agents[index], project=fleet.project)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                grant = specs[0].call(holder)
            except TaskTaken:
                recorder.add("claim", time.perf_counter() - started)
                recorder.outcomes["task_taken"] += 1
                time.sleep(IDLE_BACKOFF_SECONDS)
                continue
            except LedgerError as exc:
                recorder.add("claim", time.perf_counter() - started)
                recorder.errors.append(exc.code)
                continue
            recorder.add("claim", time.perf_counter() - started)
            if grant is None:
                recorder.outcomes["nothing_claimable"] += 1
                if stop_when_empty:
                    return
                time.sleep(IDLE_BACKOFF_SECONDS)
                continue
            try:
                for spec in specs[1:]:
                    began = time.perf_counter()
                    spec.call(holder)
                    recorder.add(f"op:{spec.name}", time.perf_counter() - began)
            except LedgerError as exc:
                recorder.errors.append(exc.code)
                continue
            recorder.add("cycle", time.perf_counter() - started)

    return body


def raw_cycles(
    target: Target, fleet: data.Fleet, captured: list[ops.CapturedOp], *, stop_when_empty: bool
) -> tuple[Callable[..., None], Callable[[], None]]:
    """The same loop as `service_cycles`, replaying the captured statements on raw connections."""
    local = threading.local()

    def body(index: int, recorder: Recorder, deadline: float) -> None:
        raw = local.raw = RawConnection(target.vendor, target.dsn)
        agent = ops.raw_agent(raw, agent=fleet.agents[index], project=fleet.project)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            outcome = _raw_op_counted(agent, captured[0], recorder)
            recorder.add("claim", time.perf_counter() - started)
            if outcome == "empty":
                recorder.outcomes["nothing_claimable"] += 1
                if stop_when_empty:
                    return
                time.sleep(IDLE_BACKOFF_SECONDS)
                continue
            if outcome in ("taken", "unique_violation"):
                recorder.outcomes["task_taken"] += 1
                time.sleep(IDLE_BACKOFF_SECONDS)
                continue
            if outcome != "ok":
                continue
            for op in captured[1:]:
                began = time.perf_counter()
                if _raw_op_counted(agent, op, recorder) != "ok":
                    break
                recorder.add(f"op:{op.spec.name}", time.perf_counter() - began)
            else:
                recorder.add("cycle", time.perf_counter() - started)

    def on_exit() -> None:
        raw = getattr(local, "raw", None)
        if raw is not None:
            raw.close()

    return body, on_exit


def _raw_op_counted(agent: ops.RawAgent, op: ops.CapturedOp, recorder: Recorder) -> str:
    try:
        return ops.raw_op(agent, op)
    except Exception as exc:
        recorder.errors.append(f"{op.spec.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return "error"


def run_service(fleet: data.Fleet, specs: list[ops.OpSpec], *, threads: int, seconds: float, hot: bool) -> RunResult:
    try:
        return run_threads(
            threads,
            service_cycles(fleet, specs, stop_when_empty=not hot),
            duration=seconds,
            on_exit=close_django_connections,
        )
    finally:
        release_pool()


def run_raw(
    target: Target, fleet: data.Fleet, captured: list[ops.CapturedOp], *, threads: int, seconds: float, hot: bool
) -> RunResult:
    body, on_exit = raw_cycles(target, fleet, captured, stop_when_empty=not hot)
    return run_threads(threads, body, duration=seconds, on_exit=on_exit)
