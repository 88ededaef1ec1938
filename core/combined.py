"""Several writes in one statement on PostgreSQL: data-modifying CTEs (SPEC §24, round trips).

A hot write that is an UPDATE, an INSERT and its event costs one round trip
each; on PostgreSQL `WITH a AS (UPDATE … RETURNING …), b AS (INSERT … SELECT
… FROM a …) INSERT …` is one. Triggers fire for CTE writes as for plain ones
(row and statement triggers alike, after the statement: the same order of
effects as before, as every trigger of these tables only counts or marks).
Two rules of such statements shape the callers:

- The parts run in no set order, and none sees another's rows except
  through RETURNING: a part that needs another's id (an event naming its
  note) reads that part's CTE, which also orders them. Two events that must
  keep their order are one INSERT of two rows (a multi-row VALUES draws ids
  in row order), never two parts.
- A row may be changed by one part only.

SQLite has no DML in CTEs: its callers run the same writes one by one
(in-process, no round trips), and the caller's one function chooses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connections, models, transaction

from core.db import run_at_once
from core.prepared import update_row, update_row_statement

_INSERTS: dict[tuple[type[models.Model], tuple[tuple[str, str], ...], str, str], tuple[str, tuple[Any, ...]]] = {}


def insert_part(
    obj: models.Model,
    *,
    using: str = "default",
    source: str | None = None,
    computed: Mapping[str, str] | None = None,
) -> tuple[str, list[Any]]:
    """The INSERT of the unsaved `obj` as `core.prepared.insert` writes it (every concrete field but an
    unset auto primary key, through each field's `pre_save` and `get_db_prep_save`), as a part of a
    combined statement: (sql, params).

    `computed` maps a field name to an SQL expression over `source` (the CTE a value comes from, such
    as the id another part inserted): the statement is then `INSERT … SELECT … FROM source`, which
    inserts nothing when `source` returned no row. An expression may hold one `%s`: the field's own
    value goes there (`%s || jsonb_build_object('note', note.id)`).
    """
    computed = dict(computed or {})
    meta = obj._meta
    connection = connections[using]
    key = (type(obj), tuple(sorted(computed.items())), source or "", connection.vendor)
    found = _INSERTS.get(key)
    if found is None:
        fields = tuple(field for field in meta.local_concrete_fields if field is not meta.auto_field)
        unknown = set(computed) - {field.name for field in fields} - {field.attname for field in fields}
        if unknown or (computed and source is None):
            raise ValueError(f"Computed fields {sorted(unknown)} need a source and must be fields of {meta.label}.")
        quote = connection.ops.quote_name
        expressions = [computed.get(field.name, computed.get(field.attname, "%s")) for field in fields]
        columns = ", ".join(quote(field.column) for field in fields)
        # Only quoted names of the model's own table and columns, and the caller's expressions, go into the text.
        if source is None:
            sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({', '.join(expressions)})"  # noqa: S608
        else:
            sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) SELECT {', '.join(expressions)} FROM {source}"  # noqa: S608
        bound = tuple(field for field, expression in zip(fields, expressions, strict=True) if "%s" in expression)
        found = _INSERTS[key] = (sql, bound)
    sql, bound = found
    params = [field.get_db_prep_save(field.pre_save(obj, add=True), connection) for field in bound]
    return sql, params


def insert_rows_part(objs: Sequence[models.Model], *, using: str = "default") -> tuple[str, list[Any]]:
    """One INSERT of several unsaved rows of one model, in the order given (ids are drawn in row order)."""
    parts = [insert_part(obj, using=using) for obj in objs]
    head, _, first_values = parts[0][0].partition(" VALUES ")
    sql = head + " VALUES " + ", ".join(first_values for _ in parts)
    return sql, [param for _, params in parts for param in params]


def combined_statement(
    parts: Sequence[tuple[str, str, Sequence[Any]]], final: tuple[str, Sequence[Any]]
) -> tuple[str, list[Any]]:
    """`WITH name AS (part), … final` and its parameters, in the order they appear."""
    names = ", ".join(f"{name} AS ({sql})" for name, sql, _ in parts)
    sql = f"WITH {names} {final[0]}" if parts else final[0]
    return sql, [param for _, _, part_params in parts for param in part_params] + list(final[1])


def run_combined(
    parts: Sequence[tuple[str, str, Sequence[Any]]], final: tuple[str, Sequence[Any]], *, using: str = "default"
) -> list[tuple[Any, ...]]:
    """Run the combined statement on PostgreSQL, in the caller's transaction: one round trip; its rows."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise ValueError("Combined statements are PostgreSQL's; SQLite runs the parts one by one.")
    sql, params = combined_statement(parts, final)
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


def run_combined_at_once(
    parts: Sequence[tuple[str, str, Sequence[Any]]], final: tuple[str, Sequence[Any]]
) -> list[tuple[Any, ...]] | None:
    """The combined statement as its own transaction (`core.db.run_at_once`): its rows, or None when
    the database could not take it now."""
    return run_at_once(*combined_statement(parts, final))


def combines(using: str = "default") -> bool:
    """Whether this database runs combined statements (PostgreSQL)."""
    return connections[using].vendor == "postgresql"


# Writes queued by `writes_combined`: (table and primary key of an UPDATE or None, sql, params, model of an INSERT).
_Queued = tuple[tuple[str, Any] | None, str, list[Any], type[models.Model] | None]
_QUEUE: ContextVar[list[_Queued] | None] = ContextVar("combined_writes", default=None)


@contextmanager
def writes_combined(using: str = "default") -> Iterator[None]:
    """Within this block on PostgreSQL, the writes made through `insert_or_queue` and
    `update_row_or_queue` wait and go out together as one statement, right before the next other
    statement and at the block's end; elsewhere (SQLite, or nested) they run as they come.

    Every other statement flushes the queue first, so a read in the block sees every write made
    before it, as if none had waited. The queued INSERTs of one model go out as one multi-row INSERT
    in the order they were made (events keep their order), each UPDATE as a part of its own; two
    UPDATEs of one row go out one by one (one row per statement part). A block left by an exception
    sends nothing it queued (the transaction it is in is rolled back by that exception's owner).
    """
    connection = connections[using]
    if connection.vendor != "postgresql" or _QUEUE.get() is not None:
        yield
        return
    queue: list[_Queued] = []
    reset = _QUEUE.set(queue)

    def flush_first(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if queue:
            _flush(queue, using)
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(flush_first):
            yield
            if queue:
                _flush(queue, using)
    finally:
        queue.clear()
        _QUEUE.reset(reset)


def _flush(queue: list[_Queued], using: str) -> None:
    waiting = list(queue)
    queue.clear()  # before executing: the wrapper sees an empty queue and lets the statement through
    rows = [row for row, _, _, _ in waiting if row is not None]
    statements: list[tuple[str, list[Any]]] = []
    inserted: dict[str, int] = {}
    for _, sql, params, model in waiting:
        if model is not None and sql in inserted:
            merged_sql, merged_params = statements[inserted[sql]]
            statements[inserted[sql]] = (merged_sql + ", " + sql.partition(" VALUES ")[2], merged_params + params)
            continue
        if model is not None:
            inserted[sql] = len(statements)
        statements.append((sql, params))
    connection = connections[using]
    if len(statements) == 1 or len(rows) != len(set(rows)):
        pending = statements if len(rows) == len(set(rows)) else [(sql, params) for _, sql, params, _ in waiting]
        for sql, params in pending:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
        return
    *parts, final = statements
    run_combined([(f"queued_{index}", sql, params) for index, (sql, params) in enumerate(parts)], final, using=using)


def insert_or_queue(obj: models.Model, using: str = "default") -> bool:
    """Queue the INSERT of the unsaved `obj` in `writes_combined`'s block: True; False outside one
    (the caller inserts it now). A queued row has no primary key until it is sent."""
    queue = _QUEUE.get()
    if queue is None or connections[using].vendor != "postgresql":
        return False
    sql, params = insert_part(obj, using=using)
    queue.append((None, sql, params, type(obj)))
    return True


def update_row_or_queue(obj: models.Model, fields: Sequence[str], using: str = "default", **where: Any) -> int | None:
    """`core.prepared.update_row` (the rows changed), or, in `writes_combined`'s block, the same
    UPDATE (`update_row_statement`) queued (None: the count is not known)."""
    queue = _QUEUE.get()
    if queue is None or connections[using].vendor != "postgresql":
        return update_row(obj, fields, using=using, **where)
    sql, params = update_row_statement(obj, fields, using=using, **where)
    queue.append(((obj._meta.db_table, obj.pk), sql, params, None))
    return None
