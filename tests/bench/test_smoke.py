"""The benchmark suite's smoke mode, run against the test database so the suite never rots.

It runs W1, W2, W3 (threads and processes), W5 and the work-context bytes at
smoke sizes, each through the services and against its raw replay or
reference, then the audit. The HTTP workloads start a production server
against a database of their own; `python -m bench run --smoke` runs those
too (docs/performance.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from bench.audit import AUDIT_QUERIES, audit
from bench.cli import evaluate_targets
from bench.environment import Target
from bench.results import table
from bench.suite import run_workloads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SMOKE_BUDGET_SECONDS = 60


def _test_database_target() -> Target:
    """The test database, as the bench's raw loops and helper processes reach it."""
    settings = connection.settings_dict
    env = {
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "LEASEHOLD_SECRET_KEY": django_settings.SECRET_KEY,
        "LEASEHOLD_DATA_DIR": str(django_settings.DATA_DIR),
    }
    if connection.vendor == "postgresql":
        user, host, port = settings["USER"] or "postgres", settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
        password = settings.get("PASSWORD") or ""
        dsn = f"host={host} port={port} user={user} dbname={settings['NAME']}"
        if password:
            dsn += f" password={password}"
        credentials = f"{user}:{password}" if password else user
        env["DATABASE_URL"] = f"postgres://{credentials}@{host}:{port}/{settings['NAME']}"
        return Target(vendor="postgresql", env=env, dsn=dsn)
    env["LEASEHOLD_BENCH_SQLITE_PATH"] = str(Path(settings["NAME"]))
    return Target(vendor="sqlite", env=env, dsn=str(Path(settings["NAME"])))


def test_smoke_mode_runs_every_in_process_workload_against_its_raw_reference_and_audits_clean():
    from bench import data

    data.offset_ids()
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}
    started = time.perf_counter()
    rows = run_workloads(
        _test_database_target(), smoke=True, workers=1, only=["w1", "w2", "w3", "procs", "w5", "bytes"], payload=payload
    )
    elapsed = time.perf_counter() - started

    assert payload["failed"] == [], payload["failed"]
    assert elapsed < SMOKE_BUDGET_SECONDS
    modes = {(row.workload.split(",")[0], row.mode) for row in rows}
    for workload in ("W1 claim-next", "W2 hot race", "W3 full cycle"):
        assert (workload, "service") in modes
        assert (workload, "raw") in modes
    assert any(row.mode == "reference" for row in rows)
    # Every service row of W1-W3 did work and has a ratio to its reference.
    for row in rows:
        if row.workload.startswith(("W1", "W2", "W3")) and row.mode == "service":
            assert row.ops > 0, row
            assert row.ratio is not None, row
            assert row.ratio > 0, row
    # The raw replay wrote real rows: its W3 cycles finished tasks with events, like the services.
    raw_w3 = [row for row in rows if row.workload == "W3 full cycle" and row.mode == "raw"]
    assert all(row.ops > 0 for row in raw_w3)
    assert set(audit()) == set(AUDIT_QUERIES)
    assert all(count == 0 for count in audit().values())
    assert "W3 full cycle" in table(rows)
    assert evaluate_targets(rows)  # evaluates without raising on a partial run


def test_the_cpu_workload_reports_cpu_per_cycle_and_per_operation_and_saves_a_profile_of_each(tmp_path, monkeypatch):
    from bench import data

    data.offset_ids()
    monkeypatch.setenv("LEASEHOLD_BENCH_PROFILE_DIR", str(tmp_path))
    payload: dict = {"rows": [], "audits": {}, "captured": {}, "failed": []}
    rows = run_workloads(_test_database_target(), smoke=True, workers=1, only=["cpu"], payload=payload)

    assert payload["failed"] == [], payload["failed"]
    by_mode = {row.mode: row for row in rows if row.workload.startswith("cpu")}
    assert set(by_mode) == {"service", "raw"}
    for row in by_mode.values():
        assert row.ops == 30
        assert row.extra["cpu_ms_per_cycle"] > 0
        assert {"claim_next", "renew", "note", "finish_done"} <= {
            name.removesuffix("_cpu_ms") for name in row.extra if name.endswith("_cpu_ms")
        }, row.extra
    # The service layer costs more CPU than replaying its statements: the ratio says by how much.
    assert by_mode["service"].ratio is not None
    assert by_mode["service"].ratio > 1
    profiles = sorted(path.name for path in tmp_path.iterdir())
    assert len([name for name in profiles if name.endswith(".prof")]) == 4, profiles
    claim = next(path for path in tmp_path.iterdir() if path.name.endswith(".txt") and "claim" in path.name)
    assert "lease_claim_next" in claim.read_text()
    assert any("CPU per full cycle" in target["name"] for target in evaluate_targets(rows))
