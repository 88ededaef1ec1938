"""The workloads (W1, W2, W3, W5, bytes), each through the services and as a raw replay.

Every workload gets its own project, so runs do not see each other's tasks;
the raw reference of a workload replays the statements captured from the
service layer in the same run, against an identical project of its own.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench import data, ops
from bench.environment import Target
from bench.harness import Recorder, RunResult, percentile, run_threads
from bench.replay import RawConnection
from bench.results import Row, row_from_run, set_ratio


@dataclass(frozen=True)
class Sizes:
    w1_tasks: int = 100_000
    w1_seconds: float = 8
    w2_agents: int = 64
    w2_tasks: int = 4
    w2_seconds: float = 8
    w2_processes: int = 8  # the W2 row with the same agents spread over processes
    w3_levels: tuple[int, ...] = (1, 4, 16, 64)
    w3_seconds: float = 6
    w3_tasks: int = 15_000
    w5_expired: int = 100_000
    w5_finished_per_task: int = 10
    w5_probe_agents: int = 2
    w5_probe_seconds: float = 5
    context_description_bytes: int = 1_000_000
    context_calls: int = 40
    page_tasks: int = 100
    page_body_bytes: int = 10_000
    page_calls: int = 40
    sqlite_processes: int = 4
    sqlite_threads: int = 4
    sweep_batch: int | None = None  # None: sweep_expired's own default


FULL = Sizes()
SMOKE = Sizes(
    w1_tasks=1_000,
    w1_seconds=0.7,
    w2_agents=4,
    w2_seconds=0.7,
    w2_processes=2,
    w3_levels=(1, 4),
    w3_seconds=0.7,
    w3_tasks=1_000,
    w5_expired=1_000,
    w5_probe_seconds=0.5,
    context_description_bytes=200_000,
    context_calls=5,
    page_calls=5,
    sqlite_processes=2,
    sqlite_threads=2,
)

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
    from bench.processes import run_processes

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

CYCLE = [ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.FINISH_DONE]


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


# --- W5: the sweep ------------------------------------------------------------------------------


def w5(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    from leases.models import Attempt

    now = datetime.now(UTC)
    tasks = sizes.w5_expired
    history = fresh_fleet("w5", agents=1, tasks=tasks)
    first, last = _task_range(history.project)
    data.bulk_history(
        history.project,
        history.agents[0],
        first_task=first,
        last_task=last,
        finished_per_task=sizes.w5_finished_per_task,
        lapsed=True,
        now=now,
    )
    data.vacuum_analyze()
    name = f"W5 sweep {tasks:,} of {tasks * (sizes.w5_finished_per_task + 1):,}"
    probe_fleet = fresh_fleet("w5probe", agents=sizes.w5_probe_agents, tasks=sizes.w3_tasks)

    baseline = run_service(probe_fleet, CYCLE, threads=sizes.w5_probe_agents, seconds=sizes.w5_probe_seconds, hot=False)
    report_box: list[Any] = []
    sweep_seconds: list[float] = []

    def sweeper() -> None:
        # The sweep runs in a process of its own, as the scheduler's job does beside the web
        # workers; in this process its garbage collector could finalize a probe thread's SQLite
        # cursor while that connection waits for the write lock the sweep holds (a stall).
        from bench.processes import run_sweep_process

        outcome = run_sweep_process(target, batch_size=sizes.sweep_batch)
        report_box.append(outcome)
        sweep_seconds.append(outcome.seconds)

    sweep_thread = threading.Thread(target=sweeper)
    stop = threading.Event()

    def watch() -> None:
        sweep_thread.join()
        stop.set()

    sweep_thread.start()
    watcher = threading.Thread(target=watch)
    watcher.start()
    during = _run_until(stop, probe_fleet, sizes.w5_probe_agents)
    watcher.join()
    release_pool()
    report = report_box[0] if report_box else None
    expired = report.expired if report else 0

    # The reference: re-arm the same leases, then one UPDATE plus one INSERT…SELECT.
    lapsed_epoch = sizes.w5_finished_per_task + 1
    Attempt.objects.filter(task__project=history.project, epoch=lapsed_epoch, status="expired").update(
        status="active", finished_at=None
    )
    data.vacuum_analyze()
    reference_seconds, reference_expired = sweep_reference(target)

    sweep_row = Row(
        database=target.vendor,
        workload=name,
        mode="service",
        concurrency=1,
        ops=expired,
        seconds=round(sweep_seconds[0], 3) if sweep_seconds else 0,
        throughput=round(expired / sweep_seconds[0], 1) if sweep_seconds and sweep_seconds[0] else None,
        p50_ms=None,
        p99_ms=None,
        extra={
            "batch_size": sizes.sweep_batch or "default",
            "batches": report.batches if report else 0,
            "worst_batch_ms": round(report.worst_batch_seconds * 1000, 1) if report else None,
        },
        errors=[] if report and not report.error else [report.error if report else "the sweep did not report"],
    )
    reference_row = Row(
        database=target.vendor,
        workload=name,
        mode="reference",
        concurrency=1,
        ops=reference_expired,
        seconds=round(reference_seconds, 3),
        throughput=round(reference_expired / reference_seconds, 1) if reference_seconds else None,
        p50_ms=None,
        p99_ms=None,
        extra={"what": "one UPDATE + one INSERT…SELECT of events"},
    )
    set_ratio(sweep_row, reference_row, by="time")
    probe_name = "W5 claim during sweep"
    baseline_row = row_from_run(target.vendor, probe_name, "baseline", baseline, kind="claim")
    during_row = row_from_run(target.vendor, probe_name, "sweeping", during, kind="claim")
    if baseline_row.p99_ms and during_row.p99_ms:
        during_row.ratio = round(during_row.p99_ms / baseline_row.p99_ms, 2)
        during_row.extra["ratio_is"] = "p99 / baseline p99"
    if expired != tasks:
        sweep_row.errors.append(f"expired {expired}, expected {tasks}")
    if reference_expired != tasks:
        reference_row.errors.append(f"expired {reference_expired}, expected {tasks}")
    return [sweep_row, reference_row, baseline_row, during_row], {}


def _run_until(stop: threading.Event, fleet: data.Fleet, threads: int) -> RunResult:
    body = service_cycles(fleet, CYCLE, stop_when_empty=True)

    def until_stopped(index: int, recorder: Recorder, deadline: float) -> None:
        while not stop.is_set():
            body(index, recorder, time.perf_counter() + 0.05)

    return run_threads(threads, until_stopped, duration=3600, on_exit=close_django_connections)


def _task_range(project: Any) -> tuple[int, int]:
    from django.db.models import Max, Min

    from ledger.models import Task

    bounds = Task.objects.filter(project=project).aggregate(first=Min("id"), last=Max("id"))
    return bounds["first"], bounds["last"]


SWEEP_REFERENCE_EVENTS = {
    "postgresql": """
        INSERT INTO ledger_event (project_id, task_id, attempt_id, actor_agent_id, actor_user_id, type, severity,
                                  payload, created_at)
        SELECT t.project_id, a.task_id, a.id, NULL, NULL, 'attempt.expired', 'info',
               jsonb_build_object('agent', g.handle, 'epoch', a.epoch, 'lapsed_at', a.lease_expires_at), %(now)s
        FROM leases_attempt a JOIN ledger_task t ON t.id = a.task_id JOIN ledger_agent g ON g.id = a.agent_id
        WHERE a.status = 'active' AND a.lease_expires_at <= %(now)s
    """,
    "sqlite": """
        INSERT INTO ledger_event (project_id, task_id, attempt_id, actor_agent_id, actor_user_id, type, severity,
                                  payload, created_at)
        SELECT t.project_id, a.task_id, a.id, NULL, NULL, 'attempt.expired', 'info',
               json_object('agent', g.handle, 'epoch', a.epoch, 'lapsed_at', a.lease_expires_at), :now
        FROM leases_attempt a JOIN ledger_task t ON t.id = a.task_id JOIN ledger_agent g ON g.id = a.agent_id
        WHERE a.status = 'active' AND a.lease_expires_at <= :now
    """,
}
SWEEP_REFERENCE_UPDATE = {
    "postgresql": """
        UPDATE leases_attempt SET status = 'expired', finished_at = lease_expires_at
        WHERE status = 'active' AND lease_expires_at <= %(now)s
    """,
    "sqlite": """
        UPDATE leases_attempt SET status = 'expired', finished_at = lease_expires_at
        WHERE status = 'active' AND lease_expires_at <= :now
    """,
}


def sweep_reference(target: Target) -> tuple[float, int]:
    """The single-statement sweep (events first, so the INSERT…SELECT still sees the rows active)."""
    raw = RawConnection(target.vendor, target.dsn)
    try:
        now = raw.adapt_datetime(datetime.now(UTC))
        started = time.perf_counter()
        cursor = raw.conn.cursor()
        if target.vendor == "sqlite":
            cursor.execute("BEGIN IMMEDIATE")
        cursor.execute(SWEEP_REFERENCE_EVENTS[target.vendor], {"now": now})
        cursor.execute(SWEEP_REFERENCE_UPDATE[target.vendor], {"now": now})
        expired = cursor.rowcount
        if target.vendor == "sqlite":
            cursor.execute("COMMIT")
        else:
            raw.conn.commit()
        return time.perf_counter() - started, expired
    finally:
        raw.close()


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
    from bench.processes import run_processes

    agents = sizes.sqlite_processes * sizes.sqlite_threads
    fleet = fresh_fleet("w3p", agents=agents, tasks=sizes.w3_tasks)
    data.analyze()
    release_pool()
    row = run_processes(
        target, fleet, processes=sizes.sqlite_processes, threads=sizes.sqlite_threads, seconds=sizes.w3_seconds
    )
    return [row], {}
