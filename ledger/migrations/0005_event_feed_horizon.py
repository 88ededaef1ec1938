"""The delta feed's horizon on PostgreSQL, without serializing event writers.

A sequence hands out event ids at insert time, so a transaction that took id
10 can commit after one that took id 11; a reader that saw 11 and moved its
cursor past it would never see 10. Migration 0004 prevented that with one
exclusive advisory lock held from a transaction's first event to its commit:
correct, but every event-writing transaction of the server then committed one
at a time, fsync included.

This migration replaces it with a *floor* each writer publishes and the
reader respects:

- Writer (statement-level BEFORE INSERT trigger, so before any row of the
  statement draws its id): once per transaction, read the sequence's last
  value `v` and take a *shared* transaction-scoped advisory lock keyed `v`
  (tagged: `FLOOR_TAG` in the top 16 bits, `v` below, so other users of
  advisory locks in the database neither collide with it nor lower the
  horizon). Every id the transaction draws afterwards is greater than `v`.
  Shared locks never wait for each other.
- Reader (`ledger_event_horizon()`): first read the sequence's last value
  `S`, then the smallest `v` among the tagged floors held by other
  sessions, `F`; serve only events with `id <= least(S, F)`, in a statement
  issued after this one.

Why no event is skipped: an event with id `e <= S` drew its id before `S` was
read, so its transaction had taken its lock (key `<= e - 1`) before that too.
If the transaction is still running when the locks are read, `F <= e - 1` and
`e` is beyond the horizon; if it has ended, its lock was released only after
its commit became visible, so the later statement that reads the events sees
it. Events above the horizon are served by a later call. Writers no longer
wait for each other; a long event-writing transaction only holds the feed
back (never makes it skip).

What the proof assumes, and operations must keep (docs/operations.md): the
sequence keeps PostgreSQL's default CACHE 1 (Django's identity column; a
cached sequence hands out ids out of order across sessions); the feed reads
the primary at READ COMMITTED (PostgreSQL's default and Leasehold's; a
REPEATABLE READ transaction would read the events in a snapshot older than
the horizon); ids stay below 2**48; events are never inserted with explicit
ids. SQLite serializes all writers and needs none of this.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.db import migrations

previous = import_module("ledger.migrations.0004_event_commit_order")

FLOOR_SETTING = "leasehold.event_floor"
FLOOR_TAG = 0x4C48  # "LH": the top 16 bits of every floor key
FLOOR_KEY_BITS = 48


def _create(sequence: str) -> list[str]:
    return [
        f"""
        CREATE OR REPLACE FUNCTION ledger_event_floor() RETURNS trigger AS $$
        BEGIN
            IF coalesce(current_setting('{FLOOR_SETTING}', true), '') = '' THEN
                PERFORM pg_advisory_xact_lock_shared(
                    ({FLOOR_TAG}::bigint << {FLOOR_KEY_BITS})
                    | coalesce(pg_sequence_last_value('{sequence}'::regclass), 0)
                );
                -- Transaction-local: reverts (with the lock) at the end or on ROLLBACK TO SAVEPOINT.
                PERFORM set_config('{FLOOR_SETTING}', 'held', true);
            END IF;
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql;
        """,
        f"""
        CREATE OR REPLACE FUNCTION ledger_event_horizon() RETURNS bigint AS $$
        DECLARE
            allocated bigint;
            floor_key bigint;
        BEGIN
            -- The order is the proof (see ledger/migrations/0005): the sequence first, then the locks.
            allocated := coalesce(pg_sequence_last_value('{sequence}'::regclass), 0);
            -- A bigint advisory key k shows as classid = k >> 32, objid = k & 0xffffffff, objsubid = 1.
            SELECT min(((l.classid::bigint & 65535) << 32) | l.objid::bigint) INTO floor_key
            FROM pg_locks l
            WHERE l.locktype = 'advisory'
              AND l.objsubid = 1
              AND l.mode = 'ShareLock'
              AND (l.classid::bigint >> 16) = {FLOOR_TAG}
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.pid IS DISTINCT FROM pg_backend_pid();
            RETURN least(allocated, floor_key);
        END;
        $$ LANGUAGE plpgsql VOLATILE;
        """,
        "DROP TRIGGER IF EXISTS ledger_event_commit_order ON ledger_event;",
        "DROP FUNCTION IF EXISTS ledger_event_order_lock();",
        """
        CREATE OR REPLACE TRIGGER ledger_event_floor
        BEFORE INSERT ON ledger_event
        FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_floor();
        """,
    ]


DROP = [
    "DROP TRIGGER IF EXISTS ledger_event_floor ON ledger_event;",
    "DROP FUNCTION IF EXISTS ledger_event_floor();",
    "DROP FUNCTION IF EXISTS ledger_event_horizon();",
]


def _sequence(schema_editor: Any) -> str:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('ledger_event', 'id')")
        (sequence,) = cursor.fetchone()
    return str(sequence)


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in _create(_sequence(schema_editor)):
            schema_editor.execute(sql)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in DROP:
            schema_editor.execute(sql)
        previous.forwards(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_event_commit_order")]
    operations = [migrations.RunPython(forwards, backwards)]
