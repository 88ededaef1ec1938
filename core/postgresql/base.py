"""Django's PostgreSQL backend, taking pooled connections through `core.pool_check`'s lean check.

Django hands psycopg_pool either its probe for every connection
(CONN_HEALTH_CHECKS) or none, and takes no `check` of its own from the pool
options; this wrapper runs with none and checks here instead: a connection
known good is used as it is, any other is probed, and one that fails the
probe goes back to the pool (which discards a broken connection) for the next.

It also gives `core.prepared` its cursor (`statement_cursor`): one that binds on the server, through
which psycopg prepares a statement after the connection's `prepare_threshold` uses of it, or, with
PREPARED_STATEMENTS off (behind a transaction pooler), one that binds on the client as Django's own.
Every other statement goes through Django's own cursor, which binds on the client and never prepares.

Either way that cursor converts each statement's placeholders once (`StatementQuery`,
`StatementClientQuery`): psycopg caches the conversion only of a statement of at most 4,096 bytes
and 50 parameters (its guard against ORM one-offs), and claim-next's candidate statement (4,165
bytes) was split afresh on every claim. `core.prepared`'s statements are a fixed set, each compiled
once, so caching all of them is bounded.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import Cursor as ClientBindingCursor  # type: ignore[attr-defined]
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from psycopg._queries import PostgresClientQuery, PostgresQuery, _query2pg, _query2pg_client
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

from core.pool_check import connection_fails_probe

# Dead connections handed out in a row before the next one is taken unchecked (the pool opens new
# ones for those it discards; after a restart every pooled connection may be dead at once).
MAX_DEAD_IN_A_ROW = 8


_TIMESTAMPTZ_OID = pg_types["timestamptz"].oid


def _statement(query: Any, vars: Any, encoding: str) -> bytes | None:
    """The statement's bytes when psycopg would convert it with parameters, else None (left to psycopg)."""
    if vars is None or not isinstance(query, str | bytes):
        return None
    return query.encode(encoding) if isinstance(query, str) else query


# Both lean on psycopg's private `convert` (3.3.9, pinned in pyproject.toml);
# tests/core/test_statement_conversion.py fails when a statement is converted afresh again.
class StatementQuery(PostgresQuery):
    """Binding on the server: psycopg's conversion, always through its cache, whatever the statement's length."""

    def convert(self, query: Any, vars: Any) -> None:
        statement = _statement(query, vars, self._tx.encoding)
        if statement is None:
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _query2pg(statement, self._tx.encoding)
        self.dump(vars)


class StatementClientQuery(PostgresClientQuery):
    """Binding on the client: the same, for `PostgresClientQuery`."""

    def convert(self, query: Any, vars: Any) -> None:
        statement = _statement(query, vars, self._tx.encoding)
        if statement is None:
            super().convert(query, vars)
            return
        self.template, self._order, self._parts = _query2pg_client(statement, self._tx.encoding)
        self.dump(vars)


class StatementCursor(ServerBindingCursor):
    _query_cls = StatementQuery

    def _convert_query(self, query: Any, params: Any = None) -> Any:
        # psycopg keeps the statement on the cursor only when it sends it unprepared; Django's query log
        # (`last_executed_query`: DEBUG, CaptureQueriesContext, the query-count pins) reads it from there,
        # and logged None for every run of a statement the connection had prepared.
        converted = self._query = super()._convert_query(query, params)
        return converted


class StatementClientCursor(ClientBindingCursor):
    _query_cls = StatementClientQuery


class DatabaseWrapper(PostgresDatabaseWrapper):
    @property
    def prepares_statements(self) -> bool:
        """Whether `core.prepared` runs its statements on a server-binding cursor (settings: PREPARED_STATEMENTS)."""
        return bool(self.settings_dict.get("PREPARED_STATEMENTS", False))

    def statement_cursor(self) -> Any:
        """Django's cursor wrapper around `core.prepared`'s psycopg cursor (what `cursor()` does, with another class).

        Query logging, execute wrappers and error translation are Django's, as for any statement.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = (StatementCursor if self.prepares_statements else StatementClientCursor)(self.connection)
            # As Django's `create_cursor`: the session's time zone for timestamptz, when the connection's differs.
            loader = self.connection.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
            if self.timezone != loader.timezone:
                register_tzloader(self.timezone, cursor)
            return self._prepare_cursor(cursor)  # type: ignore[attr-defined]  # Django's, not in the stubs

    def get_new_connection(self, conn_params: Any) -> Any:
        for _ in range(MAX_DEAD_IN_A_ROW):
            connection = super().get_new_connection(conn_params)
            pool = self.pool  # type: ignore[attr-defined]  # django-stubs lacks the pool (Django 5.1+)
            if pool is None or not connection_fails_probe(connection, idle_seconds=self.pool_check_idle_seconds):
                return connection
            pool.putconn(connection)
        return super().get_new_connection(conn_params)

    @property
    def pool_check_idle_seconds(self) -> float:
        return float(self.settings_dict.get("POOL_CHECK_IDLE_SECONDS", 5))
