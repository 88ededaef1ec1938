"""`--only mcp` at smoke size on the test database: one MCP client, its own `leasehold mcp`, a real server."""

from __future__ import annotations

import time

import pytest

from bench.cli import evaluate_targets
from bench.mcp_path import SMOKE_SECONDS, TOOLS_WORKLOAD, WORKLOAD
from bench.suite import run_workloads
from tests.agent.test_mcp import TOOLS_LIST_BYTES
from tests.bench.test_smoke import _test_database_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# A guard against a smoke run that hangs, not a speed test (speed is the bench's): 17 s alone on this kind
# of machine, 25.3 s once with a second CI run starting beside it.
BUDGET_SECONDS = 45


def test_the_mcp_workload_times_cycles_and_splits_the_machines_cpu_per_cycle_by_process_group():
    from bench import data

    data.offset_ids()
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}
    started = time.perf_counter()
    rows = run_workloads(_test_database_target(), smoke=True, workers=1, only=["mcp"], payload=payload)
    elapsed = time.perf_counter() - started

    assert payload["failed"] == [], payload["failed"]
    assert elapsed < BUDGET_SECONDS
    (cycle,) = [row for row in rows if row.workload == WORKLOAD]
    assert cycle.concurrency == 1
    assert cycle.ops > 0  # and the tasks done in the database matched them, or the row would carry an error
    assert cycle.errors == []
    assert cycle.p50_ms is not None
    assert cycle.p99_ms is not None
    assert cycle.p50_ms <= cycle.p99_ms
    assert SMOKE_SECONDS <= cycle.seconds < SMOKE_SECONDS + 5
    spent = cycle.extra
    # The MCP server and the web server did work in every cycle; the sum is theirs and the database's.
    assert spent["mcp_servers_ms"] > 0
    assert spent["web_ms"] > 0
    if cycle.database == "postgresql":
        assert spent["db_ms"] > 0
    else:
        assert spent["db_ms"] == 0  # SQLite runs inside the web workers
    total = spent["mcp_servers_ms"] + spent["web_ms"] + spent["db_ms"]
    assert spent["cpu_ms_per_cycle"] == pytest.approx(total, abs=0.02)
    assert spent["clients_ms"] > 0
    assert spent["machine_ms"] >= spent["cpu_ms_per_cycle"] * 0.9  # ticks are 10 ms; the machine holds it all
    # Before the measured session, a traced one counted each tool call's HTTP requests: at least one each.
    requests = cycle.extra["_requests"]
    assert set(requests) == {"claim_next", "checkpoint", "finish"}
    assert all(made for made in requests.values()), requests
    assert "POST /api/v1/claims/next/" in requests["claim_next"]
    assert cycle.extra["requests_per_cycle"] == sum(len(made) for made in requests.values())
    (listed,) = [row for row in rows if row.workload == TOOLS_WORKLOAD]
    assert listed.extra["bytes"] == TOOLS_LIST_BYTES
    names = {target["name"]: target for target in evaluate_targets(rows)}
    assert any("tools/list" in name and target["met"] is True for name, target in names.items())
    assert any("MCP path whole-machine CPU" in name for name in names)
