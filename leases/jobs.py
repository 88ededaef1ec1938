"""django-q2 entry points: thin wrappers over services, safe to run twice at once (SPEC §9)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from leases.idempotency import idempotency_purge
from leases.services import check_queue_wait, sweep_expired


def sweep_expired_job() -> dict[str, Any]:
    return asdict(sweep_expired())


def check_queue_wait_job() -> int:
    return check_queue_wait()


def purge_idempotency_job() -> int:
    """Delete idempotency records older than 24 h (they are a response cache, not history)."""
    return idempotency_purge()


def reconcile_job() -> dict[str, Any]:
    """Reconcile the ledger with git and the environments; never prunes (that takes an operator)."""
    from leases.reconciliation.services import reconcile

    run = reconcile()
    return {"run": run.pk, "status": run.status, "counts": run.counts, "errors": len(run.errors)}
