"""SPEC §25 "Renewals do not bloat": the lease clock (leases/models/lease_clock.py) and heap-only renewals.

- `leases_lease_clock`: one row per active attempt (attempt, task, expires_at), indexed by expiry, kept by
  triggers on `leases_attempt`: an insert of an active attempt adds its row; a change of status, expiry or
  task updates it while the attempt stays active and deletes it when it ends. Filled here from the attempts
  active at migration time.
- `attempt_active_expiry` is dropped: no index of the attempt table names a column a renewal writes, so a
  renewal is a heap-only update on PostgreSQL, given room on the row's page: `fillfactor` 50 leaves half
  of each new page for the new versions (existing pages get it as they are rewritten). Measured on the
  shared machine, where other transactions often hold back pruning: 50 kept 96 % of such updates heap-only,
  80 kept 65 %, 100 kept 2 % (docs/performance.md, "Renewals without bloat"); the price is the attempt
  table's heap at about twice its size.

On SQLite, a later migration that remakes `leases_attempt` drops these triggers (wrap it in
`keeping_sqlite_triggers`; `tests/leases/test_lease_clock.py` checks they exist after migrate).
"""

from typing import Any

from django.db import migrations, models

ACTIVE = "'active'"

SQLITE_CREATE = [
    f"""
    CREATE TRIGGER IF NOT EXISTS leases_attempt_clock_insert AFTER INSERT ON leases_attempt
    WHEN NEW.status = {ACTIVE}
    BEGIN
        INSERT INTO leases_lease_clock (attempt_id, task_id, expires_at)
        VALUES (NEW.id, NEW.task_id, NEW.lease_expires_at);
    END;
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS leases_attempt_clock_update
    AFTER UPDATE OF status, lease_expires_at, task_id ON leases_attempt
    WHEN OLD.status IS NOT NEW.status OR OLD.lease_expires_at IS NOT NEW.lease_expires_at
        OR OLD.task_id IS NOT NEW.task_id
    BEGIN
        DELETE FROM leases_lease_clock WHERE attempt_id = NEW.id AND NEW.status <> {ACTIVE};
        INSERT INTO leases_lease_clock (attempt_id, task_id, expires_at)
        SELECT NEW.id, NEW.task_id, NEW.lease_expires_at WHERE NEW.status = {ACTIVE}
        ON CONFLICT (attempt_id) DO UPDATE SET expires_at = excluded.expires_at, task_id = excluded.task_id;
    END;
    """,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS leases_attempt_clock_insert;",
    "DROP TRIGGER IF EXISTS leases_attempt_clock_update;",
]

POSTGRES_CREATE = [
    f"""
    CREATE OR REPLACE FUNCTION leases_attempt_clock_kept() RETURNS trigger AS $$
    BEGIN
        IF NEW.status <> {ACTIVE} THEN
            DELETE FROM leases_lease_clock WHERE attempt_id = NEW.id;
            RETURN NULL;
        END IF;
        IF TG_OP = 'UPDATE' THEN
            -- A renewal: the one write besides the attempt's heap-only update.
            UPDATE leases_lease_clock SET expires_at = NEW.lease_expires_at, task_id = NEW.task_id
            WHERE attempt_id = NEW.id;
            IF FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        INSERT INTO leases_lease_clock (attempt_id, task_id, expires_at)
        VALUES (NEW.id, NEW.task_id, NEW.lease_expires_at);
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE OR REPLACE TRIGGER leases_attempt_clock_insert AFTER INSERT ON leases_attempt
    FOR EACH ROW WHEN (NEW.status = {ACTIVE})
    EXECUTE FUNCTION leases_attempt_clock_kept();
    """,
    """
    CREATE OR REPLACE TRIGGER leases_attempt_clock_update AFTER UPDATE OF status, lease_expires_at, task_id
    ON leases_attempt
    FOR EACH ROW WHEN (
        OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_expires_at IS DISTINCT FROM NEW.lease_expires_at
        OR OLD.task_id IS DISTINCT FROM NEW.task_id
    )
    EXECUTE FUNCTION leases_attempt_clock_kept();
    """,
    "ALTER TABLE leases_attempt SET (fillfactor = 50)",
]
POSTGRES_DROP = [
    "ALTER TABLE leases_attempt RESET (fillfactor)",
    "DROP TRIGGER IF EXISTS leases_attempt_clock_insert ON leases_attempt;",
    "DROP TRIGGER IF EXISTS leases_attempt_clock_update ON leases_attempt;",
    "DROP FUNCTION IF EXISTS leases_attempt_clock_kept();",
]

FILL = (
    "INSERT INTO leases_lease_clock (attempt_id, task_id, expires_at) "
    f"SELECT id, task_id, lease_expires_at FROM leases_attempt WHERE status = {ACTIVE}"
)


def create_triggers(apps: Any, schema_editor: Any) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    if postgres:
        # No attempt starts, ends or renews between the fill and the triggers (released at commit).
        schema_editor.execute("LOCK TABLE leases_attempt IN SHARE ROW EXCLUSIVE MODE")
    for sql in POSTGRES_CREATE if postgres else SQLITE_CREATE:
        schema_editor.execute(sql)
    schema_editor.execute(FILL)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    for sql in POSTGRES_DROP if schema_editor.connection.vendor == "postgresql" else SQLITE_DROP:
        schema_editor.execute(sql)
    schema_editor.execute("DELETE FROM leases_lease_clock")


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0021_task_held"),
    ]

    operations = [
        migrations.CreateModel(
            name="LeaseClock",
            fields=[
                (
                    "attempt",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="clock",
                        serialize=False,
                        to="leases.attempt",
                    ),
                ),
                ("task_id", models.BigIntegerField()),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "db_table": "leases_lease_clock",
                "indexes": [models.Index(fields=["expires_at"], name="lease_clock_expiry")],
            },
        ),
        migrations.RemoveIndex(model_name="attempt", name="attempt_active_expiry"),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
