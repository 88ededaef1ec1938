"""Recording job runs: `job_started` before the work, `job_finished` after it (each its own transaction).

Two runs of one job at once (two clusters) both record: the counters are
`F()` increments and the row is created at most once (the unique name).
Writing a heartbeat appends no event: it is the job's status board, not a
change of the ledger (see `insight.models.job_heartbeat`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import F

from core.db import write_transaction
from insight.models.job_heartbeat import ERROR_MAX_CHARS, JobHeartbeat, JobName, JobOutcome
from ledger import clock

T = TypeVar("T")


def runner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:200]


def _ensure_row(name: str) -> None:
    if JobHeartbeat.objects.filter(name=name).exists():
        return
    try:
        with transaction.atomic():
            JobHeartbeat.objects.create(name=name)
    except IntegrityError:
        pass  # another run created it first


@write_transaction
def job_started(*, name: JobName | str) -> datetime:
    """Record that a run of `name` starts now; returns that instant (the run's start)."""
    now = clock.now()
    _ensure_row(name)
    JobHeartbeat.objects.filter(name=name).update(
        last_started_at=now, last_outcome=JobOutcome.RUNNING, last_runner=runner_label(), runs=F("runs") + 1
    )
    return now


@write_transaction
def job_finished(
    *,
    name: JobName | str,
    outcome: JobOutcome | str,
    result: dict[str, Any] | None = None,
    error: str = "",
    duration_ms: int | None = None,
) -> None:
    """Record how the run of `name` ended: succeeded, partial (with `error`) or failed.

    `last_failed_at` is the time of the last failed or partial run; `last_succeeded_at` of the last
    succeeded or partial one.
    """
    now = clock.now()
    _ensure_row(name)
    changes: dict[str, Any] = {
        "last_finished_at": now,
        "last_outcome": outcome,
        "last_duration_ms": duration_ms,
    }
    if result is not None:
        changes["last_result"] = result
    # A partial run did its work wherever it could (reconciliation: every readable repository), so it
    # counts as a success for staleness; its errors are still kept and shown.
    if outcome in (JobOutcome.SUCCEEDED, JobOutcome.PARTIAL):
        changes["last_succeeded_at"] = now
    if outcome in (JobOutcome.PARTIAL, JobOutcome.FAILED):
        changes["last_failed_at"] = now
        changes["last_error"] = error[:ERROR_MAX_CHARS] or str(outcome)
    if outcome == JobOutcome.FAILED:
        changes["failures"] = F("failures") + 1
    JobHeartbeat.objects.filter(name=name).update(**changes)


def job_recorded(name: JobName, work: Callable[[], T], result_of: Callable[[T], tuple[dict[str, Any], str]]) -> T:
    """Run `work`, recording its start and end, so the admin's job-health tiles and `/readyz` can tell a
    stopped scheduler or a failing job. A failure is recorded and raised again (django-q2 records it too).
    `result_of` turns the work's value into (counts, error text).
    """
    job_started(name=name)
    began = time.monotonic()
    try:
        value = work()
    except Exception as exc:
        elapsed = int((time.monotonic() - began) * 1000)
        job_finished(name=name, outcome=JobOutcome.FAILED, error=f"{type(exc).__name__}: {exc}", duration_ms=elapsed)
        raise
    elapsed = int((time.monotonic() - began) * 1000)
    counts, error = result_of(value)
    outcome = JobOutcome.PARTIAL if error else JobOutcome.SUCCEEDED
    job_finished(name=name, outcome=outcome, result=counts, error=error, duration_ms=elapsed)
    return value
