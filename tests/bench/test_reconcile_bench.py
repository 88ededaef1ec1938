"""`bench --only reconcile` (issue 33, bench/reconcile.py) at tiny sizes: its rows, their ratios, no failed run."""

from __future__ import annotations

import pytest

from bench import reconcile
from bench.suite import run_workloads
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_reconcile_workload_reports_full_incremental_and_reference_rows_per_history_size(monkeypatch):
    from bench import data

    data.offset_ids()
    monkeypatch.setattr(reconcile, "SMOKE_HISTORY_SIZES", (20, 60))
    monkeypatch.setattr(reconcile, "CHANGES", 2)
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}

    rows = run_workloads(_test_database_target(), smoke=True, workers=1, only=["reconcile"], payload=payload)

    assert payload["failed"] == [], payload["failed"]
    assert [(row.mode, row.extra.get("run")) for row in rows] == [
        ("service", "full"),
        ("service", "incremental after 2 finished"),
        ("reference", None),
    ] * 2
    # The history's ended attempts, and those the changes between runs finished (2 per run, 4 runs per size).
    assert [row.extra["rows"] for row in rows if row.mode == "reference"] == [20 * 3 + 8, 60 * 3 + 16]
    assert all(row.errors == [] for row in rows), [row.errors for row in rows]
    assert all(row.ratio is not None and row.extra["peak_mb"] >= 0 for row in rows if row.mode == "service")
    assert rows[4].extra["vs_small"] > 0
