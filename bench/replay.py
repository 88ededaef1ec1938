"""The raw-SQL reference: replay a captured trace through a plain driver connection.

PostgreSQL: psycopg 3, one connection per thread, autocommit off, a
`ClientCursor` (Django's cursor class, so statements are bound the same way),
COMMIT where Django committed. SQLite: the `sqlite3` module with the pragmas
Leasehold sets, `BEGIN IMMEDIATE` where Django issued it, COMMIT likewise.
No ORM, no model instances, no service code: only the statements.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

from bench.capture import JsonTemplate, Step, Sym, Trace

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=5000",
    "PRAGMA journal_size_limit=8388608",  # core.sqlite_wal.SQLITE_WAL_LIMIT_BYTES, as the server's connections
)
_QMARK = re.compile(r"(?<!%)%s")

Symbols = MutableMapping[str, Any]
Derive = Callable[[Symbols], None]


class Aborted(Exception):
    """The iteration stopped where the service would have refused: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RawConnection:
    """One driver connection that replays traces; `vendor` is "postgresql" or "sqlite"."""

    def __init__(self, vendor: str, dsn: str) -> None:
        self.vendor = vendor
        if vendor == "postgresql":
            import psycopg

            self.conn: Any = psycopg.connect(dsn, autocommit=False, cursor_factory=psycopg.ClientCursor)
            self._unique_errors: tuple[type[BaseException], ...] = (psycopg.errors.UniqueViolation,)
        else:
            self.conn = sqlite3.connect(dsn, isolation_level=None, check_same_thread=False, timeout=5)
            for pragma in SQLITE_PRAGMAS:
                self.conn.execute(pragma)
            self._unique_errors = (sqlite3.IntegrityError,)
        self._sql: dict[str, str] = {}

    def close(self) -> None:
        self.conn.close()

    def adapt_datetime(self, moment: datetime) -> Any:
        """A datetime as Django hands it to this driver."""
        if self.vendor == "postgresql":
            return moment
        return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ")

    def _text(self, sql: str) -> str:
        if self.vendor == "postgresql":
            return sql
        converted = self._sql.get(sql)
        if converted is None:
            converted = self._sql[sql] = _QMARK.sub("?", sql).replace("%%", "%")
        return converted

    def _bind(self, param: Any, symbols: Symbols) -> Any:
        if isinstance(param, Sym):
            value = symbols[param.name]
            return param.cast(value) if param.cast is not None and value is not None else value
        if isinstance(param, JsonTemplate):
            filled = _fill(param.template, symbols)
            if param.kind == "jsonb":
                from psycopg.types.json import Jsonb

                return Jsonb(filled, dumps=param.dumps) if param.dumps else Jsonb(filled)
            import json

            return json.dumps(filled)
        return param

    def _end(self, how: str) -> None:
        if self.vendor == "postgresql":
            self.conn.commit() if how == "COMMIT" else self.conn.rollback()
        elif self.conn.in_transaction:
            self.conn.execute(how)

    def run(self, trace: Trace, symbols: Symbols, derive: Derive | None = None) -> str:
        """Replay `trace` once with `symbols`; returns "ok", or the reason it stopped (rolled back)."""
        cursor = self.conn.cursor()
        try:
            for step in trace.steps:
                if isinstance(step, str):
                    if step in ("COMMIT", "ROLLBACK"):
                        self._end(step)
                    continue  # BEGIN: psycopg begins implicitly; SQLite's BEGIN IMMEDIATE is a statement
                self._execute(cursor, step, symbols, derive)
            return "ok"
        except Aborted as stop:
            self._end("ROLLBACK")
            return stop.reason
        except self._unique_errors:
            self._end("ROLLBACK")
            return "unique_violation"
        except BaseException:
            self._end("ROLLBACK")
            raise
        finally:
            cursor.close()

    def _execute(self, cursor: Any, step: Step, symbols: Symbols, derive: Derive | None) -> None:
        params = [self._bind(param, symbols) for param in step.params]
        cursor.execute(self._text(step.sql), params)
        if not step.fetch:
            return
        rows = cursor.fetchall()
        if not rows:
            if step.results:
                raise Aborted("empty")
            return
        row = rows[0]
        for ref in step.results:
            symbols[ref.name] = row[ref.column]
        if derive is not None and step.results:
            derive(symbols)


def _fill(template: Any, symbols: Symbols) -> Any:
    if isinstance(template, Sym):
        return symbols[template.name]
    if isinstance(template, dict):
        return {key: _fill(value, symbols) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(value, symbols) for value in template]
    return template
