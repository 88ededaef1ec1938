"""`bench --only renewals` (SPEC §25) at a tiny size on the test database: what each database's row reports."""

from __future__ import annotations

import pytest
from django.db import connection

from bench import renewals as bench_renewals
from bench.environment import Target
from bench.sizes import SMOKE


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the heap-only statistics are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_postgresql_row_counts_every_renewal_and_reports_both_tables(monkeypatch):
    monkeypatch.setattr(bench_renewals, "SMOKE_LEASES", 5)
    monkeypatch.setattr(bench_renewals, "SMOKE_RENEWALS", 50)

    (row,), _ = bench_renewals.renewals(Target("postgresql", {}, ""), SMOKE)

    assert row.outcomes == {"renew": 50}
    attempt, clock = row.extra["leases_attempt"], row.extra["leases_lease_clock"]
    assert attempt["updates"] == clock["updates"] == 50
    assert attempt["hot_share"] > 0, "no renewal was heap-only"
    assert clock["hot_share"] == 0  # its expiry is indexed: the narrow row takes the index churn
    assert "index:lease_clock_expiry_growth" in clock
    assert not any("attempt_active_expiry" in key for key in attempt)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the write-ahead log is SQLite's")
@pytest.mark.django_db(transaction=True)
def test_the_sqlite_row_reports_the_wal_through_a_held_snapshot_and_after(monkeypatch):
    monkeypatch.setattr(bench_renewals, "SMOKE_WAL_CYCLES", 6)

    (row,), _ = bench_renewals.renewals(Target("sqlite", {}, ""), SMOKE)

    assert row.outcomes == {"cycle": 6}
    extra = row.extra
    assert extra["wal_largest_bytes"] >= extra["wal_at_snapshot_release_bytes"] > 0
    assert extra["wal_after_sweep_job_bytes"] <= max(extra["wal_after_last_cycle_bytes"], 8 * 1024 * 1024)
