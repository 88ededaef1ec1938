# SPEC §25, issue 33: search indexed on both databases (leases/search.py reads these).
# PostgreSQL: a stored `search_vector` tsvector on ledger_task (title A, the first 100,000 characters
# of the description B) and on leases_note (content), set by BEFORE triggers (an UPDATE that leaves the
# text alone never recomputes it), each under a GIN index. Not generated columns: those are recomputed
# on every update of the row (a claim, a renewal's task write) and block ALTER of the text columns.
# SQLite: FTS5 external-content tables kept by AFTER triggers (names in operations/backup.py's
# SQLITE_TRIGGERS); the content stays in the tables themselves.
# Existing rows are indexed here: on a large PostgreSQL database the backfill rewrites both tables.

from typing import Any

from django.db import migrations

SEARCHABLE_CHARS = 100_000

TASK_VECTOR = (
    "setweight(to_tsvector('english', NEW.title), 'A') || "
    f"setweight(to_tsvector('english', left(NEW.description, {SEARCHABLE_CHARS})), 'B')"
)
NOTE_VECTOR = f"to_tsvector('english', left(NEW.content, {SEARCHABLE_CHARS}))"

POSTGRES_CREATE = [
    "ALTER TABLE ledger_task ADD COLUMN search_vector tsvector",
    "ALTER TABLE leases_note ADD COLUMN search_vector tsvector",
    f"""
    CREATE FUNCTION ledger_task_search_vector() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search_vector := {TASK_VECTOR};
        RETURN NEW;
    END $$
    """,
    f"""
    CREATE FUNCTION leases_note_search_vector() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search_vector := {NOTE_VECTOR};
        RETURN NEW;
    END $$
    """,
    """CREATE TRIGGER ledger_task_search_insert BEFORE INSERT ON ledger_task
    FOR EACH ROW EXECUTE FUNCTION ledger_task_search_vector()""",
    """CREATE TRIGGER ledger_task_search_update BEFORE UPDATE OF title, description ON ledger_task
    FOR EACH ROW WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.description IS DISTINCT FROM NEW.description)
    EXECUTE FUNCTION ledger_task_search_vector()""",
    """CREATE TRIGGER leases_note_search_insert BEFORE INSERT ON leases_note
    FOR EACH ROW EXECUTE FUNCTION leases_note_search_vector()""",
    """CREATE TRIGGER leases_note_search_update BEFORE UPDATE OF content ON leases_note
    FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content)
    EXECUTE FUNCTION leases_note_search_vector()""",
    "UPDATE ledger_task SET search_vector = " + TASK_VECTOR.replace("NEW.", ""),
    "UPDATE leases_note SET search_vector = " + NOTE_VECTOR.replace("NEW.", ""),
    "CREATE INDEX ledger_task_search ON ledger_task USING gin (search_vector)",
    "CREATE INDEX leases_note_search ON leases_note USING gin (search_vector)",
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS ledger_task_search_insert ON ledger_task",
    "DROP TRIGGER IF EXISTS ledger_task_search_update ON ledger_task",
    "DROP TRIGGER IF EXISTS leases_note_search_insert ON leases_note",
    "DROP TRIGGER IF EXISTS leases_note_search_update ON leases_note",
    "DROP FUNCTION IF EXISTS ledger_task_search_vector()",
    "DROP FUNCTION IF EXISTS leases_note_search_vector()",
    "ALTER TABLE ledger_task DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE leases_note DROP COLUMN IF EXISTS search_vector",
]

# Porter stemming over unicode61 words, accents kept (PostgreSQL's English configuration keeps them).
TOKENIZE = "porter unicode61 remove_diacritics 0"


def _sqlite_fts(table: str, columns: list[str]) -> list[str]:
    fts = f"{table}_fts"
    listed = ", ".join(columns)
    new = ", ".join(f"new.{column}" for column in columns)
    old = ", ".join(f"old.{column}" for column in columns)
    changed = " OR ".join(f"old.{column} IS NOT new.{column}" for column in columns)
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({listed}, content='{table}', content_rowid='id', "
        f"tokenize='{TOKENIZE}')",
        f"""CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN
            INSERT INTO {fts} (rowid, {listed}) VALUES (new.id, {new});
        END""",
        f"""CREATE TRIGGER {fts}_update AFTER UPDATE OF {listed} ON {table} WHEN {changed} BEGIN
            INSERT INTO {fts} ({fts}, rowid, {listed}) VALUES ('delete', old.id, {old});
            INSERT INTO {fts} (rowid, {listed}) VALUES (new.id, {new});
        END""",
        f"""CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN
            INSERT INTO {fts} ({fts}, rowid, {listed}) VALUES ('delete', old.id, {old});
        END""",
        f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')",
    ]


SQLITE_CREATE = [
    *_sqlite_fts("ledger_task", ["title", "description"]),
    *_sqlite_fts("leases_note", ["content"]),
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {table}_fts_{event}"
    for table in ("ledger_task", "leases_note")
    for event in ("insert", "update", "delete")
] + ["DROP TABLE IF EXISTS ledger_task_fts", "DROP TABLE IF EXISTS leases_note_fts"]


def create_search_index(apps: Any, schema_editor: Any) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    for sql in POSTGRES_CREATE if postgres else SQLITE_CREATE:
        schema_editor.execute(sql)


def drop_search_index(apps: Any, schema_editor: Any) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    for sql in POSTGRES_DROP if postgres else SQLITE_DROP:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0019_lease_samples"),
        ("ledger", "0020_task_requires_agent_labels"),
    ]

    operations = [migrations.RunPython(create_search_index, drop_search_index, elidable=False)]
