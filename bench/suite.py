"""One database's run: create it, migrate, run the chosen workloads, audit after each."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from bench.environment import Target, configure_django, create_target, drop_target, migrate, new_workdir
from bench.results import Row, table, write_json


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_database(
    vendor: str,
    *,
    smoke: bool,
    workers: int,
    only: list[str],
    out: Path,
    sweep_batch: int | None = None,
) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    workdir = new_workdir()
    target = create_target(vendor, workdir=workdir)
    configure_django(target)
    payload: dict[str, Any] = {
        "database": vendor,
        "rows": [],
        "audits": {},
        "captured": {},
        "failed": [],
    }
    started = time.perf_counter()
    try:
        migrate()
        from bench import data

        data.offset_ids()
        payload["migrate_seconds"] = round(time.perf_counter() - started, 2)
        rows = run_workloads(target, smoke=smoke, workers=workers, only=only, payload=payload, sweep_batch=sweep_batch)
        print(table(rows), flush=True)
    except (Exception, KeyboardInterrupt):
        payload["failed"].append(f"{vendor}: {traceback.format_exc(limit=6)}")
        traceback.print_exc()
    finally:
        payload["seconds"] = round(time.perf_counter() - started, 1)
        write_json(payload, out)
        _cleanup(target, workdir)
    return 1 if payload["failed"] else 0


# Workloads that write enough rows to wake autovacuum for the workloads after them.
BULK_WRITERS = frozenset({"w1", "w5"})


def run_workloads(
    target: Target,
    *,
    smoke: bool,
    workers: int,
    only: list[str],
    payload: dict[str, Any],
    sweep_batch: int | None = None,
) -> list[Row]:
    from bench import sweep, workloads
    from bench.audit import audit, failures
    from bench.sizes import FULL, SMOKE

    sizes = SMOKE if smoke else FULL
    if sweep_batch:
        sizes = dataclasses.replace(sizes, sweep_batch=sweep_batch)
    steps: list[tuple[str, Any]] = [
        ("w1", workloads.w1),
        ("w2", workloads.w2),
        ("w3", workloads.w3),
        ("procs", workloads.w3_processes),
        ("w5", sweep.w5),
        ("bytes", workloads.context_bytes),
    ]
    if "cpu" in only:
        from bench.cpu import cpu

        steps.append(("cpu", cpu))
    if "mcp" in only:
        from bench.mcp_path import mcp

        steps.append(("mcp", mcp))
    if "agent" in only:
        from bench.agent_cpu import agent

        steps.append(("agent", agent))
    if "landing" in only:
        from bench.landing import landing

        steps.append(("landing", landing))
    if "held" in only:
        from bench.held import held

        steps.append(("held", held))
    if "renewals" in only:
        from bench.renewals import renewals

        steps.append(("renewals", renewals))
    if "reconcile" in only:
        from bench.reconcile import reconcile_bench

        steps.append(("reconcile", reconcile_bench))
    if "fleet" in only:
        from bench.fleet import fleet

        steps.append(("fleet", fleet))
    if "floor" in only:
        from bench.floor import floor

        steps.append(("floor", floor))
    if "push" in only:
        from bench.push import push

        steps.append(("push", push))
    if "waiters" in only:
        from bench.push_waiters import waiters

        steps.append(("waiters", lambda target, sizes: waiters(target, sizes, workers=workers)))
    if "claimwait" in only:
        from bench.claim_waiters import claim_waiters

        steps.append(("claimwait", lambda target, sizes: claim_waiters(target, sizes, workers=workers)))
    if "runners" in only:
        from bench.runners import runners

        steps.append(("runners", lambda target, sizes: runners(target, sizes, workers=workers)))
    if "http" in only:
        from bench import http

        steps.append(
            ("http", lambda target, sizes: http.http_workloads(target, sizes, workers=workers, payload=payload))
        )
    rows: list[Row] = []
    for name, workload in steps:
        if name not in only:
            continue
        began = time.perf_counter()
        print(f"-- {target.vendor} {name}", flush=True)
        new_rows, captured = workload(target, sizes)
        payload["captured"].update(captured)
        if name in BULK_WRITERS:
            # Reclaim and analyze now: otherwise autovacuum works through W1's 100,000 tasks or W5's
            # 1,100,000 attempts during the next workloads and takes CPU from their measurement
            # (the cpu workload after W5 read up to 2x its quiet figure, raw replay included).
            from bench.data import vacuum_analyze

            vacuum_analyze()
        counts = audit()
        payload["audits"][name] = counts
        bad = failures(counts)
        if bad:
            payload["failed"].append(f"{target.vendor} {name}: audit found {bad}")
        for row in new_rows:
            # The reference's own failures (SQLite's lock timeouts under 64 raw threads) are
            # reported in its row; they are the yardstick's, not the code's, and fail nothing.
            if row.errors and row.mode not in ("raw", "reference"):
                payload["failed"].append(
                    f"{target.vendor} {row.workload} {row.mode} x{row.concurrency}: {row.errors[:2]}"
                )
            row.extra.setdefault("_audit", counts)
        _compare_processes_with_threads(new_rows, rows)
        rows += new_rows
        payload["rows"] = [row.to_json() for row in rows]
        print(table(new_rows), f"\n   ({time.perf_counter() - began:.1f} s, audit {counts})", flush=True)
    return rows


def _compare_processes_with_threads(new_rows: list[Row], earlier: list[Row]) -> None:
    """The multi-process W3 row's ratio is to W3's raw reference at the same number of agents."""
    from bench.results import set_ratio

    for row in new_rows:
        if not row.workload.startswith("W3 full cycle, "):
            continue
        for reference in earlier:
            same_level = reference.concurrency == row.concurrency
            if reference.workload == "W3 full cycle" and reference.mode == "raw" and same_level:
                set_ratio(row, reference)


def _cleanup(target: Target, workdir: Path) -> None:
    from django.db import connections

    for connection in connections.all():
        connection.close()
        close_pool = getattr(connection, "close_pool", None)
        if close_pool is not None:
            with contextlib.suppress(Exception):  # best effort at exit; the database is dropped next
                close_pool()
    drop_target(target)
    shutil.rmtree(workdir, ignore_errors=True)
