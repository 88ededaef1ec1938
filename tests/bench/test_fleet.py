"""The fleet workload (SPEC §20, bench/fleet.py) at tiny sizes: a real server, real client processes, /proc."""

from __future__ import annotations

import dataclasses

import pytest

from bench import fleet
from bench.cli import evaluate_targets
from bench.suite import run_workloads
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_fleet_race_runs_through_http_and_reports_claims_outcomes_and_cpu_per_cycle_apart(monkeypatch):
    from bench import data

    data.offset_ids()
    monkeypatch.setenv("LEASEHOLD_BENCH_FLEET_SECONDS", "2")
    target = _test_database_target()
    # The bench measures the ledger, not the per-agent rate limit (as bench.environment sets it).
    target = dataclasses.replace(target, env={**target.env, "LEASEHOLD_AGENT_REQUESTS_PER_MINUTE": "0"})
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}
    rows = run_workloads(target, smoke=True, workers=1, only=["fleet"], payload=payload)

    assert payload["failed"] == [], payload["failed"]
    by_shape = {row.workload: row for row in rows}
    assert set(by_shape) == {"fleet race, 1x1 agents", "fleet race, 2x2 agents"}
    for row in rows:
        extra = row.extra
        assert row.ops > 0, row  # finished cycles
        assert row.errors == [], row.errors
        assert extra["server_workers"] == 2  # `manage.py serve`'s default, not the suite's --workers
        assert extra["server_threads"] == fleet.SERVER_DEFAULT_THREADS
        # Every claim is granted, lost to a racer, or found nothing; each granted one made a cycle.
        answers = row.outcomes["granted"] + row.outcomes["task_taken"] + row.outcomes["nothing_claimable"]
        assert answers == extra["claims"]
        assert row.outcomes["granted"] >= row.ops
        assert extra["requests"] >= extra["claims"] + 3 * row.ops
        assert extra["granted_p99_ms"] is not None
        assert extra["server_cpu_ms_per_cycle"] > 0
        assert extra["loadgen_cpu_ms_per_cycle"] > 0
        if row.database == "postgresql":
            assert extra["database_backends_seen"] > 0
            # /proc counts 10 ms ticks per process: a 2 s run of a few cycles still reads several.
            assert extra["database_cpu_ms_per_cycle"] > 0
            assert extra["machine_cpu_ms_per_cycle"] > extra["server_cpu_ms_per_cycle"]
        else:
            assert extra["database_cpu_ms_per_cycle"] is None
            assert extra["machine_cpu_ms_per_cycle"] == extra["server_cpu_ms_per_cycle"]
    # One client never races anyone for a task.
    assert by_shape["fleet race, 1x1 agents"].outcomes["task_taken"] == 0
    assert all(count == 0 for count in payload["audits"]["fleet"].values())
    names = [target["name"] for target in evaluate_targets(rows)]
    assert any("fleet hot race claim p99" in name for name in names)
    assert any("HTTP whole-machine CPU per cycle" in name for name in names)


def test_the_fleet_serves_with_the_serve_commands_own_defaults():
    from operations.management.commands.serve import Command

    defaults = Command().create_parser("manage.py", "serve").parse_args([])

    assert (defaults.workers, defaults.threads) == (fleet.SERVER_DEFAULT_WORKERS, fleet.SERVER_DEFAULT_THREADS)
    assert fleet.server_shape() == (defaults.workers, defaults.threads)
