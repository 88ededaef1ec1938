"""Django's PostgreSQL backend, taking pooled connections through `core.pool_check`'s lean check.

Django hands psycopg_pool either its probe for every connection
(CONN_HEALTH_CHECKS) or none, and takes no `check` of its own from the pool
options; this wrapper runs with none and checks here instead: a connection
known good is used as it is, any other is probed, and one that fails the
probe goes back to the pool (which discards a broken connection) for the next.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper

from core.pool_check import connection_fails_probe

# Dead connections handed out in a row before the next one is taken unchecked (the pool opens new
# ones for those it discards; after a restart every pooled connection may be dead at once).
MAX_DEAD_IN_A_ROW = 8


class DatabaseWrapper(PostgresDatabaseWrapper):
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
