"""Keeping SQLite's triggers through a table remake, in migrations.

SQLite cannot alter a CHECK constraint (or most columns) in place: Django remakes the table (create
`new__t`, copy, drop `t`, rename). The drop takes the table's own triggers with it, and triggers
on other tables whose bodies read `t` fail at their next run ("no such table: main.t"). Wrap the
operations that remake tables in `keeping_sqlite_triggers(tables, operations)`: on SQLite the
triggers on or reading those tables are dropped first and re-created, from their own stored SQL,
after; on other databases the wrapper adds nothing that runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db import migrations

_STASHED: dict[tuple[str, ...], list[tuple[str, str]]] = {}


def _reads(sql: str, table: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(table)}(?!\w)", sql, flags=re.IGNORECASE) is not None


def _stash(tables: tuple[str, ...]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            return
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
            rows = cursor.fetchall()
            kept = [
                (name, sql)
                for name, on_table, sql in rows
                if on_table in tables or any(_reads(sql, table) for table in tables)
            ]
            for name, _ in kept:
                cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        _STASHED[tables] = kept

    return run


def _restore(tables: tuple[str, ...]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            return
        with schema_editor.connection.cursor() as cursor:
            for _, sql in _STASHED.pop(tables, []):
                cursor.execute(sql)

    return run


def keeping_sqlite_triggers(tables: Sequence[str], operations: Sequence[Any]) -> list[Any]:
    """`operations`, with SQLite's triggers on or reading `tables` dropped before and re-created after."""
    key = tuple(tables)
    return [
        migrations.RunPython(_stash(key), _restore(key), elidable=False),
        *operations,
        migrations.RunPython(_restore(key), _stash(key), elidable=False),
    ]
