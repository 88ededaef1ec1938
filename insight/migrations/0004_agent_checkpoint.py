# Each agent's latest checkpoint note, kept by a trigger on leases_note (insight/models/agent_checkpoint.py).

from typing import Any

from django.db import migrations, models

# The agent's row is replaced only by a later checkpoint, by (created_at, id): a bulk load in any order, or
# two transactions of one agent committing out of order, leave the latest.
LATEST = """
    SELECT agent_id, note_id, created_at FROM (
        SELECT a.agent_id, n.id AS note_id, n.created_at,
               row_number() OVER (PARTITION BY a.agent_id ORDER BY n.created_at DESC, n.id DESC) AS newest
        FROM {notes} n JOIN leases_attempt a ON a.id = n.attempt_id
        WHERE n.kind = 'checkpoint'
    ) AS latest WHERE newest = 1
"""
UPSERT = (
    " ON CONFLICT (agent_id) DO UPDATE SET note_id = excluded.note_id, created_at = excluded.created_at"
    " WHERE (excluded.created_at, excluded.note_id) > (insight_agentcheckpoint.created_at, insight_agentcheckpoint.note_id)"
)
INTO = "INSERT INTO insight_agentcheckpoint (agent_id, note_id, created_at)"

POSTGRES_CREATE = [
    # A statement trigger: a bulk load (COPY, an import) upserts each agent once, not once per note (the growth
    # bench's notes all share one created_at, so a row trigger would rewrite an agent's row per note in one
    # transaction). Ordered by agent, so two writers lock agents' rows in the same order.
    f"""
    CREATE OR REPLACE FUNCTION insight_note_checkpoint_kept() RETURNS trigger AS $$
    BEGIN
        {INTO} {LATEST.format(notes="new_rows")} ORDER BY agent_id {UPSERT};
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE TRIGGER insight_note_checkpoint_insert AFTER INSERT ON leases_note
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION insight_note_checkpoint_kept();
    """,
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS insight_note_checkpoint_insert ON leases_note",
    "DROP FUNCTION IF EXISTS insight_note_checkpoint_kept()",
]
# A row trigger on checkpoints only: a progress note runs no trigger code. SQLite rewrites a row in place.
SQLITE_CREATE = [
    f"""
    CREATE TRIGGER insight_note_checkpoint_insert AFTER INSERT ON leases_note
    WHEN NEW.kind = 'checkpoint'
    BEGIN
        {INTO} SELECT a.agent_id, NEW.id, NEW.created_at FROM leases_attempt a WHERE a.id = NEW.attempt_id {UPSERT};
    END;
    """,
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS insight_note_checkpoint_insert"]


def backfill() -> str:
    """Every agent's latest checkpoint (the migration's starting state; the tests compare the trigger with it)."""
    return f"{INTO} {LATEST.format(notes='leases_note')}"


def create(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # No note is missed by both the backfill and the trigger.
        schema_editor.execute("LOCK TABLE leases_note IN SHARE ROW EXCLUSIVE MODE")
    for sql in POSTGRES_CREATE if vendor == "postgresql" else SQLITE_CREATE:
        schema_editor.execute(sql)
    schema_editor.execute(backfill())


def drop(apps: Any, schema_editor: Any) -> None:
    for sql in POSTGRES_DROP if schema_editor.connection.vendor == "postgresql" else SQLITE_DROP:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("insight", "0003_report_tally"),
        # After the note and attempt tables' latest rebuild on SQLite (which would drop the trigger).
        ("leases", "0023_attempt_branch"),
    ]

    operations = [
        migrations.CreateModel(
            name="AgentCheckpoint",
            fields=[
                ("agent_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("note_id", models.BigIntegerField()),
                ("created_at", models.DateTimeField()),
            ],
        ),
        migrations.RunPython(create, drop),
    ]
