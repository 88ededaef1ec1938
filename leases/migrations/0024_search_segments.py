# SPEC §25, issue 33 (stop 40): each PostgreSQL search vector also holds its row's id segment, a
# lexeme no text can produce (a space, then `id >> SEGMENT_BITS`), so the GIN index answers "the
# matches in segment k" by intersecting two posting lists: leases/search.py walks the segments newest
# first and stops at its window, whatever the word's count (docs/performance.md, "Search, round three").
# The lexeme has no position and no query names it: matching, `ts_rank` (no length normalisation) and
# `ts_headline` (which reads the text) are unchanged.
# The trigger functions keep their names (the triggers of 0020 call them). Existing rows are extended
# in place, the GIN index dropped first and built again after (faster than maintaining it per row): on
# a large database this rewrites both tables, like 0020. SQLite (FTS5, read newest first) is unchanged.

from typing import Any

from django.db import migrations

SEARCHABLE_CHARS = 100_000
SEGMENT_BITS = 12  # leases.search.SEGMENT_BITS: 4,096 ids a segment

SEGMENT = f"array_to_tsvector(ARRAY[' ' || (NEW.id >> {SEGMENT_BITS})])"
TASK_VECTOR = (
    "setweight(to_tsvector('english', NEW.title), 'A') || "
    f"setweight(to_tsvector('english', left(NEW.description, {SEARCHABLE_CHARS})), 'B')"
)
NOTE_VECTOR = f"to_tsvector('english', left(NEW.content, {SEARCHABLE_CHARS}))"


def _function(name: str, vector: str) -> str:
    return f"""
    CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.search_vector := {vector};
        RETURN NEW;
    END $$
    """


def _backfill(table: str, index: str, expression: str) -> list[str]:
    return [
        f"DROP INDEX IF EXISTS {index}",
        f"UPDATE {table} SET search_vector = {expression}",
        f"CREATE INDEX {index} ON {table} USING gin (search_vector)",
    ]


FORWARD = [
    _function("ledger_task_search_vector", f"{TASK_VECTOR} || {SEGMENT}"),
    _function("leases_note_search_vector", f"{NOTE_VECTOR} || {SEGMENT}"),
    *_backfill("ledger_task", "ledger_task_search", "search_vector || " + SEGMENT.replace("NEW.", "")),
    *_backfill("leases_note", "leases_note_search", "search_vector || " + SEGMENT.replace("NEW.", "")),
]
BACKWARD = [
    _function("ledger_task_search_vector", TASK_VECTOR),
    _function("leases_note_search_vector", NOTE_VECTOR),
    *_backfill("ledger_task", "ledger_task_search", f"ts_delete(search_vector, ' ' || (id >> {SEGMENT_BITS}))"),
    *_backfill("leases_note", "leases_note_search", f"ts_delete(search_vector, ' ' || (id >> {SEGMENT_BITS}))"),
]


def add_segments(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in FORWARD:
            schema_editor.execute(sql)


def remove_segments(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for sql in BACKWARD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0023_attempt_branch"),
    ]

    operations = [migrations.RunPython(add_segments, remove_segments, elidable=False)]
