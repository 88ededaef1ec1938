"""django-q2 entry points: thin wrappers over services, safe to run twice at once (SPEC §9).

Each records its run on its job heartbeat (`leases.jobhealth`): started
before the work, then succeeded, partial or failed with the error, so the
admin's job-health tiles and `/readyz` can tell a stopped scheduler or a
failing job. A failure is recorded and raised again, so django-q2 still
records the failed task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from insight.models.job_heartbeat import JobName, JobOutcome
from insight.services.job_heartbeat import job_finished, job_started
from insight.services.rollups import fleet_tally_fold
from insight.services.task_counts import task_counts_fold
from leases.idempotency import idempotency_purge
from leases.services import check_queue_wait, sweep_expired

T = TypeVar("T")


def _recorded(name: JobName, work: Callable[[], T], result_of: Callable[[T], tuple[dict[str, Any], str]]) -> T:
    """Run `work`, recording its start and end. `result_of` turns its value into (counts, error text)."""
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


def sweep_expired_job() -> dict[str, Any]:
    """Expire lapsed leases; then fold the task-count changes (`insight.services.task_counts`), so the
    change table stays short between /metrics scrapes, or without any scraper, and the fleet tally's
    changes (`insight.services.rollups`: the sweep's own expiries are among them)."""

    def work() -> dict[str, Any]:
        report = asdict(sweep_expired())
        report["task_count_changes_folded"] = task_counts_fold()
        report["fleet_tally_changes_folded"] = fleet_tally_fold()
        return report

    return _recorded(JobName.SWEEP, work, lambda report: (report, ""))


def check_queue_wait_job() -> int:
    return _recorded(JobName.QUEUE_WAIT, check_queue_wait, lambda alerted: ({"alerted": alerted}, ""))


def purge_idempotency_job() -> int:
    """Delete idempotency records older than 24 h (they are a response cache, not history)."""
    return _recorded(JobName.PURGE, idempotency_purge, lambda purged: ({"purged": purged}, ""))


def reconcile_job() -> dict[str, Any]:
    """Reconcile the ledger with git and the environments; never prunes (that takes an operator)."""
    from reconciliation.models import RunStatus
    from reconciliation.services import reconcile

    def summary(run: Any) -> tuple[dict[str, Any], str]:
        counts = {"run": run.pk, "status": run.status, "opened": run.opened, "resolved": run.resolved}
        errors = run.errors or []
        if run.status == RunStatus.FAILED:
            return counts, "; ".join(str(e.get("message", e)) for e in errors)[:2000] or "the run failed"
        if errors:
            return counts, "; ".join(f"{e.get('project', '?')}: {e.get('message', e)}" for e in errors)[:2000]
        return counts, ""

    result: dict[str, Any] = {}

    def run_it() -> Any:
        run = reconcile()
        result.update({"run": run.pk, "status": run.status, "counts": run.counts, "errors": len(run.errors or [])})
        return run

    _recorded(JobName.RECONCILE, run_it, summary)
    return result


def backup_job() -> dict[str, Any]:
    """The daily backup (scheduled while LEASEHOLD_BACKUP_DIR is set): a new file; the oldest beyond KEEP go."""
    from pathlib import Path

    from django.conf import settings

    from ledger import clock
    from operations.backup import backup_scheduled

    made, removed = backup_scheduled(
        directory=Path(settings.LEASEHOLD_BACKUP_DIR), keep=settings.LEASEHOLD_BACKUP_KEEP, now=clock.now()
    )
    return {"backup": str(made), "removed": [str(path) for path in removed]}
