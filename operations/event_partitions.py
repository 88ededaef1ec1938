"""The event table's month partitions on PostgreSQL (SPEC §25; made by ledger migration 0022).

`ledger_event_pYYYYMM` holds the events whose `created_at` falls in that calendar month (UTC);
`ledger_event_default` holds a row whose month has no partition. `ensure_partitions` keeps the current
month and the next `MONTHS_AHEAD` made (the daily job `operations.event_partitions` and `archive_events`
call it). An archived month's partition is detached and kept as `ledger_event_archived_pYYYYMM`
(operations.event_archive). SQLite keeps one plain table: nothing here applies to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime

from django.db import DatabaseError, connection, transaction

MONTHS_AHEAD = 3
PARENT = "ledger_event"
DEFAULT_PARTITION = "ledger_event_default"
PARTITION_NAME = re.compile(r"^ledger_event_p(\d{4})(\d{2})$")


def partitioned() -> bool:
    """Whether the event table is partitioned here (PostgreSQL after ledger 0022)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s))", [PARENT])
        return bool(cursor.fetchone()[0])


def month_of(moment: datetime | date) -> date:
    return date(moment.year, moment.month, 1)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def partition_name(month: date) -> str:
    return f"{PARENT}_p{month:%Y%m}"


def attached_partitions() -> dict[date, str]:
    """The month partitions attached to the event table, by month (the default partition is not one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    found: dict[date, str] = {}
    for name in names:
        match = PARTITION_NAME.match(name)
        if match:
            found[date(int(match[1]), int(match[2]), 1)] = name
    return found


def default_rows_before(month: date) -> int:
    """How many events before `month` sit in the default partition (months that never had a partition)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {DEFAULT_PARTITION} WHERE created_at < %s", [month])  # noqa: S608
        return int(cursor.fetchone()[0])


@dataclass
class EnsureResult:
    made: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # month: why (its rows are in the default partition)


def ensure_partitions(*, now: datetime, months_ahead: int = MONTHS_AHEAD) -> EnsureResult:
    """Make the partitions of the current month and the next `months_ahead` that do not exist yet.

    A month whose events already sit in the default partition (the job did not run for months, or the clock
    was off) keeps them there: its partition cannot be made without moving rows, which the table refuses.
    """
    result = EnsureResult()
    if not partitioned():
        return result
    existing = attached_partitions()
    month = month_of(now)
    for _ in range(months_ahead + 1):
        if month not in existing:
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SELECT ledger_event_partition_create(%s)", [month])
                result.made.append(partition_name(month))
            except DatabaseError as exc:
                result.refused[f"{month:%Y-%m}"] = str(exc).splitlines()[0]
        month = next_month(month)
    return result
