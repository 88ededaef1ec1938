"""`--only reconcile` (SPEC §25, issue 33): a reconciliation run's time and memory at two history sizes.

One project with a real git repository, HOLDS live leases (the live work, the same at both sizes) and a
history of ended attempts that grows from the small size to the large one (FINISHED_PER_TASK per task,
all within the 30-day lookback). Per size, rows:

- **full**: `reconcile(full=True)`, the first run's path: the whole window scanned in chunks by id;
- **incremental**: `reconcile()` after CHANGES attempts were claimed and finished through the services
  (the work of a few minutes), REPEATS times: median seconds, range in `extra`;
- **reference**: the read every run made before issue 33, as raw SQL fetched whole: every attempt
  ended in the last 30 days with its task and agent (what cost 21 to 153 s and 2.6 GB at 1M tasks).

`peak_mb` is the run's peak of Python allocations (tracemalloc, a run of its own: tracing slows the
code it traces, so seconds come from untraced runs). The large incremental row's `vs_small` is its
median over the small one's: the target is at most 2 (cost follows live work, not history).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import data
from bench.cycles import fresh_fleet
from bench.environment import Target
from bench.replay import RawConnection
from bench.results import Row, set_ratio
from bench.sizes import SMOKE, Sizes

HISTORY_SIZES = (10_000, 100_000)
SMOKE_HISTORY_SIZES = (1_000, 10_000)
FINISHED_PER_TASK = 3
HOLDS = 50
CHANGES = 20
REPEATS = 3

REFERENCE_SQL = """
    SELECT a.id, a.task_id, t.key, t.status, t.project_id, g.handle, a.status, a.branch, a.label, a.base_commit,
           a.head_commit, a.commits_ahead, a.seen_commits_ahead, a.finished_at, t.landed_commit
    FROM leases_attempt a JOIN ledger_task t ON t.id = a.task_id JOIN ledger_agent g ON g.id = a.agent_id
    WHERE a.status IN ({statuses}) AND a.finished_at >= {since}
    ORDER BY a.id
"""


def _git_repository(root: Path) -> Path:
    """A repository with one commit on `main`: what the project's runs read git from."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    repository = root / "repository"
    identity = ["-c", "user.name=b", "-c", "user.email=b@example.com"]
    for args in (
        ["init", "-q", "-b", "main", str(repository)],
        ["-C", str(repository), *identity, "commit", "-q", "--allow-empty", "-m", "initial"],
    ):
        subprocess.run(["git", *args], check=True, env=env, capture_output=True)
    return repository


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _peak_mb(call: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        call()
        return round(tracemalloc.get_traced_memory()[1] / 1_000_000, 1)
    finally:
        tracemalloc.stop()


def _changes(fleet: data.Fleet, tasks: list[Any], round_number: int) -> None:
    """CHANGES attempts claimed and finished through the services: the work done between two runs."""
    from leases.services import HolderProof, attempt_finish, lease_claim

    agent = fleet.agents[0]
    for index, task in enumerate(tasks):
        grant = lease_claim(task=task, agent=agent, branch=f"feature/bench-r{round_number}-{index}")
        proof = HolderProof(attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=agent)
        attempt_finish(proof=proof, outcome="review")


def _reference(target: Target) -> tuple[float, float, int]:
    """The pre-issue-33 read of the lookback window, fetched whole: (seconds, peak MB, rows)."""
    from reconciliation.ended import ENDED_LOOKBACK, ENDED_STATUSES

    raw = RawConnection(target.vendor, target.dsn)
    try:
        since = raw.adapt_datetime(datetime.now(UTC) - ENDED_LOOKBACK)
        placeholder = "%s" if target.vendor == "postgresql" else "?"
        statuses = ", ".join(f"'{status}'" for status in ENDED_STATUSES)
        sql = REFERENCE_SQL.format(since=placeholder, statuses=statuses)
        box: list[int] = []

        def read() -> None:
            cursor = raw.conn.cursor()
            cursor.execute(sql, (since,))
            box.append(len(cursor.fetchall()))
            if target.vendor == "postgresql":
                raw.conn.rollback()

        seconds = _timed(read)
        return seconds, _peak_mb(read), box[0]
    finally:
        raw.close()


def _timed_row(
    target: Target,
    workload: str,
    mode: str,
    *,
    seconds: float,
    extra: dict[str, Any],
    ops: int = 1,
    errors: list[str] | None = None,
) -> Row:
    """A row of one timing (or the median of `ops` timings), single-threaded."""
    return Row(
        database=target.vendor,
        workload=workload,
        mode=mode,
        concurrency=1,
        ops=ops,
        seconds=round(seconds, 6),
        throughput=None,
        p50_ms=round(seconds * 1000, 1),
        p99_ms=None,
        extra=extra,
        errors=errors or [],
    )


def reconcile_bench(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    from ledger.models import Project, Task
    from reconciliation.models import ReconciliationRun
    from reconciliation.services import reconcile

    levels = SMOKE_HISTORY_SIZES if sizes == SMOKE else HISTORY_SIZES
    root = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    rows: list[Row] = []
    medians: dict[int, float] = {}
    try:
        fleet = fresh_fleet("reconcile", agents=2, tasks=0)
        Project.objects.filter(pk=fleet.project.pk).update(repository=str(_git_repository(root)))
        now = datetime.now(UTC)
        first, last = data.bulk_ready_tasks(fleet.project, HOLDS)
        data.bulk_holds(fleet.agents[1], first_task=first, last_task=last, now=now)
        grown = 0
        round_number = 0
        for level in levels:
            first, last = data.bulk_ready_tasks(fleet.project, level - grown)
            data.bulk_history(
                fleet.project,
                fleet.agents[1],
                first_task=first,
                last_task=last,
                finished_per_task=FINISHED_PER_TASK,
                lapsed=False,
                now=now,
            )
            grown = level
            spare_first, _ = data.bulk_ready_tasks(fleet.project, CHANGES * (REPEATS + 1))
            spare = list(Task.objects.filter(pk__gte=spare_first).order_by("id"))
            data.vacuum_analyze()
            name = f"reconcile, {level:,} tasks of history ({level * FINISHED_PER_TASK:,} ended attempts)"
            full_seconds = _timed(lambda: reconcile(full=True))
            full_peak = _peak_mb(lambda: reconcile(full=True))
            samples: list[float] = []
            for repeat in range(REPEATS):
                round_number += 1
                _changes(fleet, spare[repeat * CHANGES : (repeat + 1) * CHANGES], round_number)
                samples.append(_timed(reconcile))
            round_number += 1
            _changes(fleet, spare[REPEATS * CHANGES :], round_number)
            incremental_peak = _peak_mb(reconcile)
            errors = [
                f"run {run.pk} {run.status}: {run.errors}"
                for run in ReconciliationRun.objects.filter(status__in=("failed", "superseded"))
            ]
            reference_seconds, reference_peak, reference_rows = _reference(target)
            medians[level] = statistics.median(samples)
            full_row = _timed_row(
                target,
                name,
                "service",
                seconds=full_seconds,
                extra={"run": "full", "peak_mb": full_peak},
                errors=errors,
            )
            incremental_row = _timed_row(
                target,
                name,
                "service",
                ops=REPEATS,
                seconds=medians[level],
                extra={
                    "run": f"incremental after {CHANGES} finished",
                    "range_ms": [round(min(samples) * 1000, 1), round(max(samples) * 1000, 1)],
                    "peak_mb": incremental_peak,
                },
            )
            reference_row = _timed_row(
                target,
                name,
                "reference",
                seconds=reference_seconds,
                extra={"what": "the 30-day read before issue 33", "rows": reference_rows, "peak_mb": reference_peak},
            )
            set_ratio(full_row, reference_row, by="time")
            set_ratio(incremental_row, reference_row, by="time")
            rows += [full_row, incremental_row, reference_row]
        small, large = levels
        rows[4].extra["vs_small"] = round(medians[large] / medians[small], 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows, {}
