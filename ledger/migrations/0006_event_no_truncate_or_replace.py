"""Close the two ways around 0002's triggers (SPEC §1.6).

- PostgreSQL: row triggers do not see TRUNCATE, so a statement-level trigger
  refuses it (same function as 0002, which names `TG_OP`).
- SQLite: `INSERT OR REPLACE` (or `REPLACE INTO`) of an existing id deletes the
  old row without firing delete triggers (they fire only with
  `recursive_triggers`), so a BEFORE INSERT trigger refuses an insert whose id
  is already taken. Django's own inserts leave the id to SQLite and never meet
  it.

The test suite's flush between transactional tests suspends these around
Django's TRUNCATE / DELETE (`tests/conftest.py`), as it does 0002's.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE TRIGGER IF NOT EXISTS ledger_event_no_replace BEFORE INSERT ON ledger_event
    WHEN EXISTS (SELECT 1 FROM ledger_event WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, 'ledger_event is append-only: REPLACE of an existing event refused'); END;
    """,
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS ledger_event_no_replace;"]

POSTGRES_CREATE = [
    """
    CREATE OR REPLACE TRIGGER ledger_event_no_truncate
    BEFORE TRUNCATE ON ledger_event
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_refuse_change();
    """,
]
POSTGRES_DROP = ["DROP TRIGGER IF EXISTS ledger_event_no_truncate ON ledger_event;"]


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
    dependencies = [("ledger", "0005_event_feed_horizon")]
    operations = [migrations.RunPython(create_triggers, drop_triggers)]
