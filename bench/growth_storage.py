"""The growth workload's storage rows (issue 33): bytes per row of the tables history grows, and per 1,000
agent cycles.

- Per row: a table's bytes (PostgreSQL: `pg_total_relation_size`, the heap, its TOAST and its indexes;
  SQLite: the `dbstat` pages of the table and its indexes, and for notes their FTS5 index's tables) over
  its row count.
- Per 1,000 cycles: the database's size (PostgreSQL: `pg_database_size`; SQLite: the used pages after a
  WAL checkpoint) before and after `cycles` full agent cycles through the services (claim-next, renew,
  checkpoint, finish), scaled to 1,000. Free space a table had kept from the bulk load absorbs part of
  the growth, so the figure is the size the database asks of the disk, not the bytes written.
"""

from __future__ import annotations

from typing import Any

from bench import ops

TABLES = {
    "task": ("ledger", "Task"),
    "attempt": ("leases", "Attempt"),
    "note": ("leases", "Note"),
    "event": ("ledger", "Event"),
    "allocation": ("leases", "Allocation"),
}


def _table_bytes(cursor: Any, vendor: str, table: str) -> int | None:
    if vendor == "postgresql":
        # A partitioned table (the event log, ledger 0022) has no storage of its own: sum its partitions.
        cursor.execute(
            "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s::regclass)),"
            " pg_total_relation_size(%s))",
            [table, table],
        )
        return int(cursor.fetchone()[0])
    try:
        cursor.execute(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
            "(SELECT name FROM sqlite_master WHERE tbl_name = %s OR name LIKE %s)",
            [table, f"{table}_fts%"],
        )
    except Exception:  # a SQLite built without the dbstat table
        return None
    return int(cursor.fetchone()[0])


def database_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_database_size(current_database())")
            return int(cursor.fetchone()[0])
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.execute("PRAGMA page_size")
        page = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_count")
        pages = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA freelist_count")
        return page * (pages - int(cursor.fetchone()[0]))


def per_row() -> list[dict[str, Any]]:
    from django.apps import apps
    from django.db import connection

    rows = []
    with connection.cursor() as cursor:
        for label, (app, model) in TABLES.items():
            table = apps.get_model(app, model)._meta.db_table
            cursor.execute(f"SELECT count(*) FROM {table}")
            count = int(cursor.fetchone()[0])
            size = _table_bytes(cursor, connection.vendor, table)
            rows.append(
                {
                    "group": "storage",
                    "name": f"bytes per {label}",
                    "rows": count,
                    "bytes": size,
                    "per_row": round(size / count, 1) if size is not None and count else None,
                }
            )
    return rows


def per_cycles(setup: dict[str, Any], cycles: int) -> dict[str, Any]:
    """Run `cycles` service cycles; the database's growth, per 1,000 cycles."""
    holder = ops.Holder(agent=setup["agent"], project=setup["project"])
    before = database_bytes()
    for _ in range(cycles):
        for spec in (ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.FINISH_DONE):
            if spec.call(holder) is None:
                raise RuntimeError("the storage cycles ran out of ready tasks")
    grown = database_bytes() - before
    return {
        "group": "storage",
        "name": "bytes per 1,000 agent cycles",
        "cycles": cycles,
        "bytes": grown,
        "per_row": round(grown * 1000 / cycles, 1),
    }
