"""Make the event table append-only at the database level (SPEC §1.6).

Triggers refuse UPDATE and DELETE on `ledger_event`, on PostgreSQL and on
SQLite. On SQLite, a later migration that rebuilds this table (Django does
that for many ALTERs) drops its triggers: such a migration must recreate them
(`tests/ledger/test_events_append_only.py` checks they exist after migrate).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE TRIGGER IF NOT EXISTS ledger_event_no_update BEFORE UPDATE ON ledger_event
    BEGIN SELECT RAISE(ABORT, 'ledger_event is append-only: UPDATE refused'); END;
    """,
    """
    CREATE TRIGGER IF NOT EXISTS ledger_event_no_delete BEFORE DELETE ON ledger_event
    BEGIN SELECT RAISE(ABORT, 'ledger_event is append-only: DELETE refused'); END;
    """,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS ledger_event_no_update;",
    "DROP TRIGGER IF EXISTS ledger_event_no_delete;",
]

POSTGRES_CREATE = [
    """
    CREATE OR REPLACE FUNCTION ledger_event_refuse_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = 'ledger_event is append-only: ' || TG_OP || ' refused',
            ERRCODE = 'restrict_violation';
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE OR REPLACE TRIGGER ledger_event_append_only
    BEFORE UPDATE OR DELETE ON ledger_event
    FOR EACH ROW EXECUTE FUNCTION ledger_event_refuse_change();
    """,
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS ledger_event_append_only ON ledger_event;",
    "DROP FUNCTION IF EXISTS ledger_event_refuse_change();",
]


def statements(vendor: str, *, create: bool) -> list[str]:
    if vendor == "postgresql":
        return POSTGRES_CREATE if create else POSTGRES_DROP
    if vendor == "sqlite":
        return SQLITE_CREATE if create else SQLITE_DROP
    raise RuntimeError(f"Leasehold supports PostgreSQL and SQLite, not {vendor}.")


def create_triggers(apps: Any, schema_editor: Any) -> None:
    for sql in statements(schema_editor.connection.vendor, create=True):
        schema_editor.execute(sql)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    for sql in statements(schema_editor.connection.vendor, create=False):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]
    operations = [migrations.RunPython(create_triggers, drop_triggers)]
