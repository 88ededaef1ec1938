# SPEC §25, issue 33 (stop 42): each PostgreSQL search vector also holds its row's project, a lexeme
# no text can produce (a space, `p`, the project's id), so a search's visibility (the caller's projects)
# is one more posting list GIN intersects, not two primary-key lookups (attempt, then task) for every
# match read: a word whose matches are mostly in other projects no longer reads them all
# (docs/performance.md, "Search, round four"). It also holds its row's stretch (a space, `c`, `id >>
# COARSE_BITS`: 16 segments), so a walk past old years without a match skips a stretch at a time.
# A note's project is its attempt's task's: read once by the insert trigger; a task moved to another
# project rewrites its own vector (its update trigger now fires on project_id too) and its notes'
# (a trigger of its own). Like the segment (0024), these lexemes have no position and no query names it:
# matching, `ts_rank` and `ts_headline` are unchanged. Existing rows are extended in place with the GIN
# indexes dropped and built again: on a large database this rewrites both tables, like 0020 and 0024.
# SQLite (FTS5, visibility checked per match read newest first) is unchanged.

from typing import Any

from django.db import migrations

SEARCHABLE_CHARS = 100_000
SEGMENT_BITS = 12  # leases.search.SEGMENT_BITS

COARSE_BITS = 16  # leases.search.COARSE_BITS: 16 segments a stretch

SEGMENT = f"array_to_tsvector(ARRAY[' ' || (NEW.id >> {SEGMENT_BITS})])"
STRETCH = f"array_to_tsvector(ARRAY[' c' || (NEW.id >> {COARSE_BITS})])"
TASK_VECTOR = (
    "setweight(to_tsvector('english', NEW.title), 'A') || "
    f"setweight(to_tsvector('english', left(NEW.description, {SEARCHABLE_CHARS})), 'B')"
)
NOTE_VECTOR = f"to_tsvector('english', left(NEW.content, {SEARCHABLE_CHARS}))"
# The project lexeme of an id (NULL: none, an attempt not there yet; the note is then found unscoped only).
PROJECT = "array_to_tsvector(array_remove(ARRAY[' p' || ({})], NULL))"
NOTE_PROJECT = (
    "SELECT task.project_id FROM leases_attempt attempt JOIN ledger_task task ON task.id = attempt.task_id "
    "WHERE attempt.id = NEW.attempt_id"
)


OLD_STRETCH = STRETCH.replace("NEW.", "")
NOTE_STRETCH = STRETCH.replace("NEW.", "note.")


def _function(name: str, vector: str) -> str:
    return f"""
    CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search_vector := {vector};
        RETURN NEW;
    END $$
    """


def _task_update_trigger(columns: list[str]) -> list[str]:
    changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in columns)
    return [
        "DROP TRIGGER IF EXISTS ledger_task_search_update ON ledger_task",
        f"""CREATE TRIGGER ledger_task_search_update BEFORE UPDATE OF {", ".join(columns)} ON ledger_task
        FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION ledger_task_search_vector()""",
    ]


MOVED_NOTES = """
    CREATE OR REPLACE FUNCTION leases_note_search_moved() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE leases_note SET search_vector =
            ts_delete(search_vector, ' p' || OLD.project_id) || array_to_tsvector(ARRAY[' p' || NEW.project_id])
        WHERE attempt_id IN (SELECT id FROM leases_attempt WHERE task_id = NEW.id);
        RETURN NULL;
    END $$
"""

FORWARD = [
    _function(
        "ledger_task_search_vector", f"{TASK_VECTOR} || {SEGMENT} || {STRETCH} || {PROJECT.format('NEW.project_id')}"
    ),
    _function(
        "leases_note_search_vector", f"{NOTE_VECTOR} || {SEGMENT} || {STRETCH} || {PROJECT.format(NOTE_PROJECT)}"
    ),
    *_task_update_trigger(["title", "description", "project_id"]),
    MOVED_NOTES,
    """CREATE TRIGGER leases_note_search_moved AFTER UPDATE OF project_id ON ledger_task
    FOR EACH ROW WHEN (OLD.project_id IS DISTINCT FROM NEW.project_id)
    EXECUTE FUNCTION leases_note_search_moved()""",
    "DROP INDEX IF EXISTS ledger_task_search",
    f"UPDATE ledger_task SET search_vector = search_vector || {OLD_STRETCH} || {PROJECT.format('project_id')}",
    "CREATE INDEX ledger_task_search ON ledger_task USING gin (search_vector)",
    "DROP INDEX IF EXISTS leases_note_search",
    f"""UPDATE leases_note note
    SET search_vector = note.search_vector || {NOTE_STRETCH} || {PROJECT.format("task.project_id")}
    FROM leases_attempt attempt JOIN ledger_task task ON task.id = attempt.task_id
    WHERE attempt.id = note.attempt_id""",
    "CREATE INDEX leases_note_search ON leases_note USING gin (search_vector)",
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS leases_note_search_moved ON ledger_task",
    "DROP FUNCTION IF EXISTS leases_note_search_moved()",
    *_task_update_trigger(["title", "description"]),
    _function("ledger_task_search_vector", f"{TASK_VECTOR} || {SEGMENT}"),
    _function("leases_note_search_vector", f"{NOTE_VECTOR} || {SEGMENT}"),
    "DROP INDEX IF EXISTS ledger_task_search",
    "UPDATE ledger_task SET search_vector = " + f"{TASK_VECTOR} || {SEGMENT}".replace("NEW.", ""),
    "CREATE INDEX ledger_task_search ON ledger_task USING gin (search_vector)",
    "DROP INDEX IF EXISTS leases_note_search",
    "UPDATE leases_note SET search_vector = " + f"{NOTE_VECTOR} || {SEGMENT}".replace("NEW.", ""),
    "CREATE INDEX leases_note_search ON leases_note USING gin (search_vector)",
]


def add_projects(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in FORWARD:
            schema_editor.execute(sql)


def remove_projects(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in BACKWARD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0024_search_segments"),
    ]

    operations = [migrations.RunPython(add_projects, remove_projects, elidable=False)]
