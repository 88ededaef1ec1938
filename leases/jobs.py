"""django-q2 entry points: thin wrappers over services, safe to run twice at once (SPEC §9).

Each records its run on its job heartbeat (`leases.jobhealth`): started
before the work, then succeeded, partial or failed with the error, so the
admin's job-health tiles and `/readyz` can tell a stopped scheduler or a
failing job. A failure is recorded and raised again, so django-q2 still
records the failed task.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, TypeVar

from core.sqlite_wal import checkpoint_default_database
from insight.models.job_heartbeat import JobName
from insight.services.job_heartbeat import job_recorded
from insight.services.rollups import agent_day_tally_fold, fleet_tally_fold, report_tally_fold
from insight.services.task_counts import task_counts_fold
from leases.idempotency import idempotency_purge
from leases.search import flush_pending_entries
from leases.services import check_queue_wait, sweep_expired

T = TypeVar("T")


def sweep_expired_job() -> dict[str, Any]:
    """Expire lapsed leases; then fold the task-count changes (`insight.services.task_counts`), so the
    change table stays short between /metrics scrapes, or without any scraper, and the fleet tally's
    changes, the report's and agent health's (`insight.services.rollups`: the sweep's own expiries are among
    them). On SQLite, last, checkpoint the WAL and cut its file back when no reader holds it
    (`core.sqlite_wal`, SPEC §25); on PostgreSQL, flush the search indexes' pending entries
    (`leases.search.flush_pending_entries`)."""

    def work() -> dict[str, Any]:
        report = asdict(sweep_expired())
        report["task_count_changes_folded"] = task_counts_fold()
        report["fleet_tally_changes_folded"] = fleet_tally_fold()
        report["report_tally_changes_folded"] = report_tally_fold()
        report["agent_day_tally_changes_folded"] = agent_day_tally_fold()
        checkpoint = checkpoint_default_database()
        if checkpoint is not None:
            report["wal_checkpoint"] = asdict(checkpoint)
        flushed = flush_pending_entries()
        if flushed is not None:
            report["search_pending_pages_flushed"] = flushed
        return report

    return job_recorded(JobName.SWEEP, work, lambda report: (report, ""))


def check_queue_wait_job() -> int:
    return job_recorded(JobName.QUEUE_WAIT, check_queue_wait, lambda alerted: ({"alerted": alerted}, ""))


def purge_idempotency_job() -> int:
    """Delete idempotency records older than 24 h (they are a response cache, not history)."""
    return job_recorded(JobName.PURGE, idempotency_purge, lambda purged: ({"purged": purged}, ""))
