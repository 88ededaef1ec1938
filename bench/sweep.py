"""W5: the sweep of expired leases, in a process of its own while agents claim, against a
single-statement reference."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench import data
from bench.cycles import CYCLE, close_django_connections, fresh_fleet, release_pool, run_service, service_cycles
from bench.environment import Target
from bench.harness import Recorder, RunResult, run_threads
from bench.processes import run_sweep_process
from bench.replay import RawConnection
from bench.results import Row, row_from_run, set_ratio
from bench.sizes import Sizes

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
