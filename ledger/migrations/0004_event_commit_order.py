"""Event ids in commit order on PostgreSQL, so the delta feed never skips an event.

A sequence hands out ids at insert time; a transaction that took id 10 can
commit after one that took id 11, and a reader that saw 11 and moved its
cursor past it would never see 10. This statement-level trigger takes a
transaction-scoped advisory lock before any event row gets its id: event
writers then commit one after another from their first event on, and every
event id is visible before any larger one. SQLite serializes all writers
already and needs nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# An arbitrary constant shared by every Leasehold process (ASCII "LEASEHLD").
EVENT_ORDER_LOCK_KEY = 0x4C45415345484C44

CREATE = [
    f"""
    CREATE OR REPLACE FUNCTION ledger_event_order_lock() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock({EVENT_ORDER_LOCK_KEY});
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE OR REPLACE TRIGGER ledger_event_commit_order
    BEFORE INSERT ON ledger_event
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_order_lock();
    """,
]
DROP = [
    "DROP TRIGGER IF EXISTS ledger_event_commit_order ON ledger_event;",
    "DROP FUNCTION IF EXISTS ledger_event_order_lock();",
]


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in CREATE:
            schema_editor.execute(sql)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in DROP:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0003_groups")]
    operations = [migrations.RunPython(forwards, backwards)]
