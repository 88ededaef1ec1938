"""Django's PostgreSQL backend, taking pooled connections through `core.pool_check`'s lean check.

Django hands psycopg_pool either its probe for every connection
(CONN_HEALTH_CHECKS) or none, and takes no `check` of its own from the pool
options; this wrapper runs with none and checks here instead: a connection
known good is used as it is, any other is probed, and one that fails the
probe goes back to the pool (which discards a broken connection) for the next.

It also gives `core.prepared` a cursor that binds on the server (`prepared_cursor`), through which
psycopg prepares a statement after the connection's `prepare_threshold` uses of it; every other
statement goes through Django's own cursor, which binds on the client and never prepares.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

from core.pool_check import connection_fails_probe

# Dead connections handed out in a row before the next one is taken unchecked (the pool opens new
# ones for those it discards; after a restart every pooled connection may be dead at once).
MAX_DEAD_IN_A_ROW = 8


_TIMESTAMPTZ_OID = pg_types["timestamptz"].oid


class DatabaseWrapper(PostgresDatabaseWrapper):
    @property
    def prepares_statements(self) -> bool:
        """Whether `core.prepared` runs its statements on a server-binding cursor (settings: PREPARED_STATEMENTS)."""
        return bool(self.settings_dict.get("PREPARED_STATEMENTS", False))

    def prepared_cursor(self) -> Any:
        """Django's cursor wrapper around a server-binding psycopg cursor (what `cursor()` does, with another class).

        Query logging, execute wrappers and error translation are Django's, as for any statement.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = ServerBindingCursor(self.connection)
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
