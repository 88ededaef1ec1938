"""The floor workload (bench/floor.py) at tiny sizes: the raw replay, a bare WSGI server under gunicorn,
Leasehold, whole-machine CPU from /proc, and the profile of Leasehold's workers split by layer."""

from __future__ import annotations

import dataclasses

import pytest

from bench import floor
from bench.suite import run_workloads
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_floor_serves_the_same_cycle_bare_and_reports_cpu_per_cycle_beside_raw_and_leasehold(monkeypatch, tmp_path):
    from bench import data

    data.offset_ids()
    monkeypatch.setenv("LEASEHOLD_BENCH_FLOOR_PROFILE", "1")
    monkeypatch.setenv("LEASEHOLD_BENCH_PROFILE_DIR", str(tmp_path))
    target = _test_database_target()
    # The bench measures the ledger, not the per-agent rate limit (as bench.environment sets it).
    target = dataclasses.replace(target, env={**target.env, "LEASEHOLD_AGENT_REQUESTS_PER_MINUTE": "0"})
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}
    rows = run_workloads(target, smoke=True, workers=1, only=["floor"], payload=payload)

    assert payload["failed"] == [], payload["failed"]
    assert [row.mode for row in rows] == list(floor.MODES)
    by_mode = {row.mode: row for row in rows}
    for row in rows:
        assert row.errors == [], row.errors
        assert row.ops == floor.SMOKE_CYCLES
        assert row.extra["machine_cpu_ms_per_cycle"] > 0
        assert row.extra["client_cpu_ms_per_cycle"] > 0
    for mode in ("floor", "leasehold", "leasehold keyed"):
        assert by_mode[mode].extra["server_cpu_ms_per_cycle"] > 0
        assert by_mode[mode].ratio is not None
    assert by_mode["raw"].extra["server_cpu_ms_per_cycle"] == 0
    if rows[0].database == "postgresql":
        # /proc counts 10 ms ticks per process: a few cycles may read zero on one backend, not on all.
        assert sum(row.extra["database_cpu_ms_per_cycle"] for row in rows) > 0
    else:
        assert all(row.extra["database_cpu_ms_per_cycle"] is None for row in rows)
    # The floor answers what Leasehold answered, the same size within a few bytes (ids and times vary).
    bodies = by_mode["floor"].extra["bodies"]
    assert set(bodies) == {"claim", "renew", "notes", "finish"}
    for sizes in bodies.values():
        assert abs(sizes["floor_bytes"] - sizes["leasehold_bytes"]) <= 8, bodies
    layers = by_mode["leasehold"].extra["layers"]
    assert layers["total"] > 0
    assert layers["services (with their ORM and driver)"] > 0
    assert layers["gunicorn (request thread, outside the WSGI call)"] > 0
    assert (tmp_path / f"floor-leasehold-{rows[0].database}.prof").exists()
    assert all(count == 0 for count in payload["audits"]["floor"].values())
