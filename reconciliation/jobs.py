"""django-q2 entry point of reconciliation: a thin wrapper over `reconcile`, safe to run twice at once (SPEC §9)."""

from __future__ import annotations

from typing import Any

from insight.models import JobName
from insight.services.job_heartbeat import job_recorded
from landing.services import tasks_landed_outside
from reconciliation.landed import LandedOutside
from reconciliation.models import ReconciliationRun, RunStatus
from reconciliation.services import reconcile


def reconcile_job() -> dict[str, Any]:
    """Reconcile the ledger with git and the environments; never prunes (that takes an operator).

    Delivered tasks whose head is already in their target are landed first (SPEC §21.2).
    """

    def summary(run: ReconciliationRun) -> tuple[dict[str, Any], str]:
        counts = {"run": run.pk, "status": run.status, "opened": run.opened, "resolved": run.resolved}
        errors = run.errors or []
        if run.status == RunStatus.FAILED:
            return counts, "; ".join(str(e.get("message", e)) for e in errors)[:2000] or "the run failed"
        if errors:
            return counts, "; ".join(f"{e.get('project', '?')}: {e.get('message', e)}" for e in errors)[:2000]
        return counts, ""

    result: dict[str, Any] = {}
    landed: list[str] = []

    def land(found: LandedOutside) -> None:
        landed.extend(task.key for task in tasks_landed_outside(landed=found))

    def run_it() -> ReconciliationRun:
        run = reconcile(land_outside=land)
        result.update(
            {
                "run": run.pk,
                "status": run.status,
                "counts": run.counts,
                "errors": len(run.errors or []),
                "landed": landed,
            }
        )
        return run

    job_recorded(JobName.RECONCILE, run_it, summary)
    return result
