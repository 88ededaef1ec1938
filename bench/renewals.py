"""`--only renewals` (SPEC §25 "Renewals do not bloat", issue 33): what renewals leave behind.

PostgreSQL: LEASES live leases (claimed through `lease_claim_next`), then RENEWALS renewals through
`attempt_renew`, round robin, one agent. The row reports, for the attempt table and the lease clock
(`leases_lease_clock`, the narrow table a renewal writes besides its heap-only update of the attempt),
the updates and the share of them that were heap-only (`n_tup_hot_upd`), the dead row versions left
(`n_dead_tup`, autovacuum as configured), and each table's and index's size before and after
(`pg_relation_size`), scaled to 100,000 renewals.

SQLite: WAL_CYCLES agent cycles (claim-next, renew, note, finish) through the services, while a second
connection holds a read snapshot for the middle third of them (as a long read or a backup does); the row
reports the `-wal` file's size at its largest, when the snapshot is released, and at the end (after the
sweep job's checkpoint, which runs once a minute in a deployment and here after the last cycle).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import ops
from bench.cycles import fresh_fleet
from bench.environment import Target
from bench.harness import RunResult
from bench.results import Row, row_from_run
from bench.sizes import SMOKE, Sizes

LEASES = 1_000
# 100,000 renewals take 3-30 minutes on the shared machine; LEASEHOLD_BENCH_RENEWALS runs fewer (rows scale to 100k).
RENEWALS = int(os.environ.get("LEASEHOLD_BENCH_RENEWALS", "100000"))
SMOKE_LEASES = 50
SMOKE_RENEWALS = 2_000
WAL_CYCLES = 1_000
SMOKE_WAL_CYCLES = 60
PER = 100_000
TABLES = ("leases_attempt", "leases_lease_clock")


def _pg_stats() -> dict[str, dict[str, int]]:
    """Per table of TABLES that exists: updates, heap-only updates, dead rows, and the sizes of it and its indexes."""
    from django.db import connection

    stats: dict[str, dict[str, int]] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        for table in TABLES:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, pg_relation_size(relid) "
                "FROM pg_stat_user_tables WHERE relname = %s",
                [table],
            )
            found = cursor.fetchone()
            if found is None:
                continue
            updates, hot, dead, size = found
            stats[table] = {"updates": updates, "hot": hot, "dead": dead, "bytes": size}
            cursor.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes WHERE relname = %s",
                [table],
            )
            for index, index_size in cursor.fetchall():
                stats[table][f"index:{index}"] = index_size
    return stats


def _claims(fleet: Any, count: int) -> list[ops.Holder]:
    holders = []
    for _ in range(count):
        holder = ops.Holder(agent=fleet.agents[0], project=fleet.project)
        ops.CLAIM_NEXT.call(holder)
        if holder.grant is None:
            raise RuntimeError("the renewals bench found nothing to claim")
        holders.append(holder)
    return holders


def _growth(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], renewals: int) -> dict[str, Any]:
    scale = PER / renewals
    report: dict[str, Any] = {}
    for table, now in after.items():
        then = before.get(table, {})
        updates = now["updates"] - then.get("updates", 0)
        hot = now["hot"] - then.get("hot", 0)
        report[table] = {
            "updates": updates,
            "hot_share": round(hot / updates, 3) if updates else None,
            f"dead_rows_per_{PER}": round(now["dead"] * scale),
            "bytes_before": then.get("bytes"),
            "bytes_after": now["bytes"],
            **{
                f"{key}_growth": round(value / then[key], 2) if then.get(key) else None
                for key, value in now.items()
                if key.startswith("index:")
            },
        }
    return report


def renewals_postgres(target: Target, sizes: Sizes) -> Row:
    from leases.services import attempt_renew

    leases, renewals = (SMOKE_LEASES, SMOKE_RENEWALS) if sizes == SMOKE else (LEASES, RENEWALS)
    fleet = fresh_fleet("renewals", agents=1, tasks=leases)
    holders = _claims(fleet, leases)
    before = _pg_stats()
    samples: list[float] = []
    began = time.perf_counter()
    for number in range(renewals):
        started = time.perf_counter()
        attempt_renew(proof=holders[number % leases].proof)
        samples.append(time.perf_counter() - started)
    run = RunResult(
        threads=1,
        seconds=time.perf_counter() - began,
        latencies={"renew": samples},
        outcomes=Counter(renew=renewals),
        errors=[],
    )
    after = _pg_stats()
    return row_from_run(
        target.vendor,
        f"renewals: {renewals:,} renewals of {leases:,} leases",
        "service",
        run,
        kind="renew",
        oldest_transaction_seconds=_oldest_transaction_seconds(),
        **_growth(before, after, renewals),
    )


def _oldest_transaction_seconds() -> float | None:
    """The cluster's oldest open transaction now: its snapshot keeps dead rows from being pruned in every
    database of the cluster (a shared machine's other loads too), so heap-only updates find no room."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM max(now() - xact_start)) FROM pg_stat_activity "
            "WHERE backend_xmin IS NOT NULL OR backend_xid IS NOT NULL"
        )
        (seconds,) = cursor.fetchone()
    return None if seconds is None else round(float(seconds), 1)


def _wal_bytes(database: Path) -> int:
    wal = database.with_name(database.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def renewals_sqlite(target: Target, sizes: Sizes) -> Row:
    from django.db import connection

    from bench.cycles import CYCLE
    from leases.jobs import sweep_expired_job

    cycles = SMOKE_WAL_CYCLES if sizes == SMOKE else WAL_CYCLES
    database = Path(str(connection.settings_dict["NAME"]))
    fleet = fresh_fleet("walbound", agents=1, tasks=cycles + 1)
    holder = ops.Holder(agent=fleet.agents[0], project=fleet.project)
    hold_from, hold_until = cycles // 3, 2 * cycles // 3
    reader = sqlite3.connect(database, isolation_level=None)
    largest, at_release, samples = 0, 0, []
    began = time.perf_counter()
    try:
        for number in range(cycles):
            if number == hold_from:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM ledger_task").fetchone()  # the snapshot starts at this read
            if number == hold_until:
                reader.execute("COMMIT")
                at_release = _wal_bytes(database)
            started = time.perf_counter()
            for spec in CYCLE:
                spec.call(holder)
            samples.append(time.perf_counter() - started)
            largest = max(largest, _wal_bytes(database))
    finally:
        reader.close()
    seconds = time.perf_counter() - began
    before_job = _wal_bytes(database)
    sweep_expired_job()
    run = RunResult(threads=1, seconds=seconds, latencies={"cycle": samples}, outcomes=Counter(cycle=cycles), errors=[])
    return row_from_run(
        target.vendor,
        f"renewals: WAL over {cycles:,} cycles, a snapshot held for a third",
        "service",
        run,
        kind="cycle",
        wal_largest_bytes=largest,
        wal_at_snapshot_release_bytes=at_release,
        wal_after_last_cycle_bytes=before_job,
        wal_after_sweep_job_bytes=_wal_bytes(database),
    )


def renewals(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    row = renewals_postgres(target, sizes) if target.is_postgres else renewals_sqlite(target, sizes)
    return [row], {}
