"""SPEC §25: `ledger_task.held` follows the attempts, kept by triggers on `leases_attempt`.

`held` is true exactly while the task has an active attempt (one at most: `attempt_one_active_per_task`),
whether or not its lease has lapsed; claim-next's index `task_claim_queue` holds the ready tasks that are
not held. Every path that starts or ends an attempt (claims, finish, release, revoke, hand-offs, the sweep's
set-based SQL, landings, reviews, imports, the bench's bulk rows) inserts an attempt or changes its status,
so the triggers keep the column true whatever wrote the attempt; no Python writes it. An insert of an
active attempt marks its task; a change of status recomputes the mark from the active-attempt index.

On SQLite, a later migration that remakes `leases_attempt` drops these triggers (wrap it in
`keeping_sqlite_triggers`); one that remakes `ledger_task` must too, as the triggers' bodies read it
(`tests/leases/test_task_held.py` checks they exist after migrate).
"""

from typing import Any

from django.db import migrations

HELD_NOW = (
    "EXISTS (SELECT 1 FROM leases_attempt AS a WHERE a.task_id = NEW.task_id AND a.status = 'active')"
)

SQLITE_CREATE = [
    """
    CREATE TRIGGER IF NOT EXISTS leases_attempt_held_insert AFTER INSERT ON leases_attempt
    WHEN NEW.status = 'active'
    BEGIN UPDATE ledger_task SET held = 1 WHERE id = NEW.task_id AND NOT held; END;
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS leases_attempt_held_update AFTER UPDATE OF status, task_id ON leases_attempt
    WHEN OLD.status IS NOT NEW.status OR OLD.task_id IS NOT NEW.task_id
    BEGIN
        UPDATE ledger_task SET held = {HELD_NOW} WHERE id = NEW.task_id AND held IS NOT {HELD_NOW};
        UPDATE ledger_task SET held = 0 WHERE id = OLD.task_id AND OLD.task_id IS NOT NEW.task_id AND NOT EXISTS (
            SELECT 1 FROM leases_attempt AS a WHERE a.task_id = OLD.task_id AND a.status = 'active'
        );
    END;
    """,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS leases_attempt_held_insert;",
    "DROP TRIGGER IF EXISTS leases_attempt_held_update;",
]

POSTGRES_CREATE = [
    """
    CREATE OR REPLACE FUNCTION leases_attempt_held_inserted() RETURNS trigger AS $$
    BEGIN
        UPDATE ledger_task SET held = TRUE WHERE id = NEW.task_id AND NOT held;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE OR REPLACE FUNCTION leases_attempt_held_updated() RETURNS trigger AS $$
    BEGIN
        UPDATE ledger_task SET held = {HELD_NOW} WHERE id = NEW.task_id AND held IS DISTINCT FROM {HELD_NOW};
        IF OLD.task_id IS DISTINCT FROM NEW.task_id THEN
            UPDATE ledger_task SET held = FALSE WHERE id = OLD.task_id AND NOT EXISTS (
                SELECT 1 FROM leases_attempt AS a WHERE a.task_id = OLD.task_id AND a.status = 'active'
            );
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE OR REPLACE TRIGGER leases_attempt_held_insert AFTER INSERT ON leases_attempt
    FOR EACH ROW WHEN (NEW.status = 'active')
    EXECUTE FUNCTION leases_attempt_held_inserted();
    """,
    """
    CREATE OR REPLACE TRIGGER leases_attempt_held_update AFTER UPDATE OF status, task_id ON leases_attempt
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.task_id IS DISTINCT FROM NEW.task_id)
    EXECUTE FUNCTION leases_attempt_held_updated();
    """,
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS leases_attempt_held_insert ON leases_attempt;",
    "DROP TRIGGER IF EXISTS leases_attempt_held_update ON leases_attempt;",
    "DROP FUNCTION IF EXISTS leases_attempt_held_inserted();",
    "DROP FUNCTION IF EXISTS leases_attempt_held_updated();",
]

# The column was added false: only the tasks with an active attempt are written.
MARK_EXISTING = "UPDATE ledger_task SET held = TRUE WHERE id IN (SELECT task_id FROM leases_attempt WHERE status = 'active')"


def statements(vendor: str, *, create: bool) -> list[str]:
    if vendor == "postgresql":
        return POSTGRES_CREATE if create else POSTGRES_DROP
    return SQLITE_CREATE if create else SQLITE_DROP


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        # No attempt starts or ends between the mark and the triggers (released at commit).
        schema_editor.execute("LOCK TABLE leases_attempt IN SHARE ROW EXCLUSIVE MODE")
    for sql in statements(schema_editor.connection.vendor, create=True):
        schema_editor.execute(sql)
    schema_editor.execute(MARK_EXISTING)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    for sql in statements(schema_editor.connection.vendor, create=False):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0020_search_index"),
        ("ledger", "0021_task_held"),
    ]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
