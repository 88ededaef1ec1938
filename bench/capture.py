"""Capture the statements the ORM emits for one operation, and turn them into a replayable trace.

`capture(fn)` runs `fn` under Django's `CaptureQueriesContext` (for the
statement text and the transaction boundaries: BEGIN/COMMIT as Django logs
them) and an execute wrapper (for the SQL exactly as handed to the driver,
with its parameters, and the rows each statement returned).

`symbolize` then replaces every parameter that varies from one operation to
the next by a named symbol: a parameter is bound to a symbol when its value
equals the symbol's value in the captured operation (ambiguities are settled
by the column or JSON key it belongs to). Symbols whose values come back from
the database (a claimed task's id, an inserted attempt's id) are located in
the captured result rows by column name. The raw loop replays the same SQL
text with fresh symbol values each iteration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

TRANSACTION_MARKERS = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})


class CaptureError(RuntimeError):
    """The captured trace cannot be turned into a faithful replay; names the statement."""


@dataclass
class Statement:
    sql: str
    params: tuple[Any, ...]
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass
class Captured:
    """One operation's trace: statements and transaction markers, in order."""

    steps: list[Statement | str]
    logged: list[str]  # CaptureQueriesContext's text of each step, for the report

    @property
    def statements(self) -> list[Statement]:
        return [step for step in self.steps if isinstance(step, Statement)]

    @property
    def commits(self) -> int:
        return sum(1 for step in self.steps if step == "COMMIT")


class _RecordingCursor:
    """Forwards everything to the driver's cursor and keeps a copy of the rows fetched."""

    def __init__(self, cursor: Any, statement: Statement) -> None:
        self._cursor = cursor
        self._statement = statement

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        for row in self._cursor:
            self._statement.rows.append(tuple(row))
            yield row

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        if row is not None:
            self._statement.rows.append(tuple(row))
        return row

    def fetchmany(self, size: int = 1) -> Any:
        rows = self._cursor.fetchmany(size)
        self._statement.rows.extend(tuple(row) for row in rows)
        return rows

    def fetchall(self) -> Any:
        rows = self._cursor.fetchall()
        self._statement.rows.extend(tuple(row) for row in rows)
        return rows


def capture(operation: Callable[[], Any], *, using: str = "default") -> tuple[Any, Captured]:
    """Run `operation` once and record its statements; returns its result and the trace."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    connection = connections[using]
    recorded: list[Statement] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Mapping[str, Any]) -> Any:
        if many:
            raise CaptureError(f"executemany is not replayed: {sql[:120]}")
        statement = Statement(sql=sql, params=tuple(params or ()))
        recorded.append(statement)
        result = execute(sql, params, many, context)
        django_cursor = context["cursor"]
        description = django_cursor.cursor.description
        if description:
            statement.columns = tuple(column[0] for column in description)
            django_cursor.cursor = _RecordingCursor(django_cursor.cursor, statement)
        return result

    with CaptureQueriesContext(connection) as logged, connection.execute_wrapper(wrapper):
        result = operation()
    steps: list[Statement | str] = []
    pending = iter(recorded)
    texts = []
    for entry in logged.captured_queries:
        text = entry["sql"]
        texts.append(text)
        if text in TRANSACTION_MARKERS:
            steps.append(text)
        else:
            steps.append(next(pending))
    leftover = list(pending)
    if leftover:
        raise CaptureError(f"{len(leftover)} statements were not logged by CaptureQueriesContext")
    return result, Captured(steps=steps, logged=texts)


# --- symbols ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sym:
    """A parameter that takes the value of a symbol in each iteration (`cast`: the driver wrapper, e.g. Int8)."""

    name: str
    cast: Any = None


@dataclass(frozen=True)
class JsonTemplate:
    """A JSON parameter whose leaves may be symbols; `kind` says how the driver wants it."""

    template: Any
    kind: str  # "jsonb" (psycopg Jsonb) or "text" (a JSON string, SQLite)
    dumps: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class ResultRef:
    """Symbol `name` is read from column `column` of the first row of this statement's result."""

    name: str
    column: int


@dataclass
class Step:
    sql: str
    params: list[Any]  # constants, Sym or JsonTemplate
    results: list[ResultRef] = field(default_factory=list)
    fetch: bool = False


@dataclass
class Trace:
    """A replayable operation: steps and transaction markers."""

    name: str
    steps: list[Step | str]
    symbols: set[str]

    def describe(self) -> list[str]:
        return [step if isinstance(step, str) else step.sql for step in self.steps]


_COLUMN_BEFORE = re.compile(r'"?(\w+)"?\s*(?:=|<=|>=|<|>|<>|!=|IN \(|LIKE)\s*(?:\(|\s)*$', re.IGNORECASE)
_INSERT = re.compile(r'^INSERT INTO "?(\w+)"? \(([^)]*)\) VALUES', re.IGNORECASE)


def _placeholder_contexts(sql: str, count: int) -> list[str]:
    """The column name each %s of `sql` belongs to, as far as the text says ("" when unknown)."""
    insert = _INSERT.match(sql)
    if insert:
        columns = [name.strip().strip('"') for name in insert.group(2).split(",")]
        return [columns[index % len(columns)] for index in range(count)]
    contexts = []
    position = 0
    for _ in range(count):
        found = sql.find("%s", position)
        if found < 0:
            contexts.append("")
            continue
        match = _COLUMN_BEFORE.search(sql[max(0, found - 80) : found])
        contexts.append(match.group(1) if match else "")
        position = found + 2
    return contexts


# Below this, an integer could be a constant (1 in `SELECT 1 AS a`, a count, an epoch): it is bound
# to a symbol only when its column or JSON key names the symbol. Bench ids are offset above it.
SMALL_INT = 100_000


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    for kind in (int, str, datetime):
        if isinstance(a, kind) and isinstance(b, kind):
            return str(a) == str(b) if kind is str else a == b
    return type(a) is type(b) and a == b


def _candidates(value: Any, symbols: Mapping[str, Any]) -> list[str]:
    if value is None or isinstance(value, bool) or value == "" or value == 0:
        return []
    return [name for name, symbol_value in symbols.items() if _same(value, symbol_value)]


def _cast(value: Any) -> Any:
    kind = type(value)
    return None if kind in (int, str, datetime) or not isinstance(value, int) else kind


# A service may read the clock more than once in one call (claim-next's unlocked look for a candidate,
# then the claim's own transaction): a datetime this close to `now` is that clock, read a moment apart.
NOW_READ_APART = timedelta(seconds=5)


def _read_now(param: Any, symbols: Mapping[str, Any]) -> Any:
    now = symbols.get("now")
    if isinstance(param, datetime) and isinstance(now, datetime) and abs(param - now) <= NOW_READ_APART:
        return Sym("now", _cast(param))
    return param


def _choose(value: Any, context: str, symbols: Mapping[str, Any], hints: Mapping[str, set[str]], where: str) -> Any:
    names = _candidates(value, symbols)
    if not names:
        return value
    hinted = [name for name in names if context and (context == name or context in hints.get(name, set()))]
    if isinstance(value, int) and abs(value) < SMALL_INT:
        names = hinted
    if not names:
        return value
    if len(names) == 1:
        return Sym(names[0], _cast(value))
    if len(hinted) == 1:
        return Sym(hinted[0], _cast(value))
    raise CaptureError(f"{where}: value {value!r} (column {context or '?'}) could be any of {sorted(names)}")


def _symbolize_json(obj: Any, key: str, symbols: Mapping[str, Any], hints: Mapping[str, set[str]], where: str) -> Any:
    if isinstance(obj, dict):
        return {k: _symbolize_json(v, k, symbols, hints, where) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_symbolize_json(v, key, symbols, hints, where) for v in obj]
    return _choose(obj, key, symbols, hints, where)


def _has_symbol(obj: Any) -> bool:
    if isinstance(obj, Sym):
        return True
    if isinstance(obj, dict):
        return any(_has_symbol(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_symbol(v) for v in obj)
    return False


def symbolize(
    name: str,
    captured: Captured,
    *,
    symbols: Mapping[str, Any],
    results: Mapping[str, str],
    hints: Mapping[str, set[str]] | None = None,
) -> Trace:
    """Bind each varying parameter of `captured` to a symbol.

    `symbols`: every symbol's value in the captured operation, in the form the
    driver received it (datetimes as Django adapted them). `results`: symbol →
    column name for symbols the database returns; each is read from the first
    statement whose result has that column with that value. Where the service
    would refuse, the replay meets the same constraint (the one-active index)
    and rolls back.
    """
    import json

    hints = hints or {}
    located: set[str] = set()
    steps: list[Step | str] = []
    used: set[str] = set()
    for index, item in enumerate(captured.steps):
        if isinstance(item, str):
            steps.append(item)
            continue
        where = f"{name} statement {index}"
        available = {k: v for k, v in symbols.items() if k not in results or k in located}
        contexts = _placeholder_contexts(item.sql, len(item.params))
        params: list[Any] = []
        for value, context in zip(item.params, contexts, strict=True):
            obj = getattr(value, "obj", None)
            if obj is not None and type(value).__name__ in ("Jsonb", "Json"):
                template = _symbolize_json(obj, context, available, hints, where)
                params.append(
                    JsonTemplate(template, "jsonb", getattr(value, "dumps", None)) if _has_symbol(template) else value
                )
                continue
            if isinstance(value, str) and value[:1] in ("{", "["):
                try:
                    parsed = json.loads(value)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict | list):
                    template = _symbolize_json(parsed, context, available, hints, where)
                    params.append(JsonTemplate(template, "text") if _has_symbol(template) else value)
                    continue
            params.append(_choose(value, context, available, hints, where))
        params = [_read_now(param, available) for param in params]
        for param in params:
            if isinstance(param, Sym):
                used.add(param.name)
            elif isinstance(param, datetime):
                raise CaptureError(f"{where}: datetime parameter {param!r} matches no symbol")
        step = Step(sql=item.sql, params=params, fetch=bool(item.columns))
        if item.rows:
            row = item.rows[0]
            for symbol, column_name in results.items():
                if symbol in located or symbol not in symbols:
                    continue
                for column, (title, cell) in enumerate(zip(item.columns, row, strict=False)):
                    if title == column_name and _same(cell, symbols[symbol]):
                        step.results.append(ResultRef(symbol, column))
                        located.add(symbol)
                        break
        steps.append(step)
    missing = {s for s in used if s in results and s not in located}
    if missing:
        raise CaptureError(f"{name}: result symbols {sorted(missing)} were never found in a result")
    return Trace(name=name, steps=steps, symbols=used | located)
