"""The connection budget of one server (SPEC §25, "Connections are budgeted"): computed here, once.

One `manage.py serve` runs gunicorn (`--workers` processes of `--threads` request threads) and a
django-q2 cluster. What each part may hold at most, on PostgreSQL:

- each web worker process: its psycopg pool, `threads + resume threads` (the request threads and
  the pool that re-runs woken waiters, `core.parking.resume_threads`: no thread ever waits for a
  connection, and the pool can never grow past what the threads can use), plus one connection of
  its own for `LISTEN` (`push.waiting`);
- the cluster: one connection per django-q2 worker, plus its sentinel (the scheduler), its monitor
  and, with the ORM broker (no `LEASEHOLD_REDIS_URL`), its pusher. The cluster keeps these open
  (`CONN_MAX_AGE` None in `qcluster`): they are its own, so a busy web server cannot take them.

    per server = workers x (threads + max(1, threads // 4) + 1) + cluster workers + 3 (ORM broker; 2 with Redis)

`serve` prints the budget against the server's `max_connections` and the role's connection limit
at start-up (`describe`). On SQLite there is no pool: each thread keeps its own connection to the
file, and the budget is not a limit of anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.parking import resume_threads

# serve's defaults (operations/management/commands/serve.py), also the settings' defaults when a
# web process is started some other way.
DEFAULT_WEB_WORKERS = 2
DEFAULT_WEB_THREADS = 8


@dataclass(frozen=True)
class ConnectionBudget:
    web_workers: int
    web_threads: int
    cluster_workers: int  # 0: no cluster beside this web server (serve --no-cluster)
    orm_broker: bool = True

    @property
    def pool_size(self) -> int:
        """The psycopg pool's max_size in one web worker process: every thread that can run a request."""
        return self.web_threads + resume_threads(self.web_threads)

    @property
    def web(self) -> int:
        return self.web_workers * (self.pool_size + 1)  # + the process's LISTEN connection

    @property
    def listeners(self) -> int:
        """The connections that must reach PostgreSQL itself, never a transaction pooler."""
        return self.web_workers

    @property
    def cluster(self) -> int:
        if self.cluster_workers == 0:
            return 0
        return self.cluster_workers + (3 if self.orm_broker else 2)

    @property
    def total(self) -> int:
        return self.web + self.cluster

    def formula(self) -> str:
        threads, resume = self.web_threads, resume_threads(self.web_threads)
        broker = "sentinel, monitor, pusher" if self.orm_broker else "sentinel, monitor"
        cluster = (
            f"cluster {self.cluster_workers} workers + {broker} = {self.cluster}"
            if self.cluster_workers
            else "no cluster"
        )
        return (
            f"web {self.web_workers} x ({threads} threads + {resume} resume + 1 listener) = {self.web}, "
            f"{cluster}: {self.total} per server"
        )


def server_budget(web_workers: int, web_threads: int, *, cluster: bool) -> ConnectionBudget:
    """A server's budget with the settings' cluster (its workers and broker)."""
    from django.conf import settings

    return ConnectionBudget(
        web_workers=web_workers,
        web_threads=web_threads,
        cluster_workers=settings.Q_CLUSTER["workers"] if cluster else 0,
        orm_broker="orm" in settings.Q_CLUSTER,
    )


@dataclass(frozen=True)
class ServerLimits:
    max_connections: int
    reserved: int  # superuser_reserved_connections (+ reserved_connections from PostgreSQL 16)
    in_use: int
    role: str
    role_limit: int | None  # None: no CONNECTION LIMIT (or a superuser, whom it does not bind)
    jit: str


def server_limits(connection: Any) -> ServerLimits:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int"
            " + coalesce(current_setting('reserved_connections', true)::int, 0),"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),"
            " r.rolname, CASE WHEN r.rolsuper OR r.rolconnlimit < 0 THEN NULL ELSE r.rolconnlimit END,"
            " current_setting('jit')"
            " FROM pg_roles r WHERE r.rolname = current_user"
        )
        row = cursor.fetchone()
    return ServerLimits(*row)


def describe(budget: ConnectionBudget, limits: ServerLimits | None, *, transaction_pooling: bool) -> tuple[str, bool]:
    """One line for the start-up log, and whether the budget fits what the server allows."""
    if limits is None:
        return "Connections: SQLite, no pool (each thread keeps one connection to the file).", True
    available = limits.max_connections - limits.reserved
    if transaction_pooling:
        # The pool connections go to the pooler; PostgreSQL sees its pool_size plus the listeners.
        needed, what = budget.listeners, f"{budget.listeners} direct LISTEN connections (the rest through the pooler)"
    else:
        needed, what = budget.total, "this server"
    line = (
        f"Connections: {budget.formula()}; PostgreSQL max_connections {limits.max_connections} "
        f"({available} for non-superusers, {limits.in_use} in use now)"
    )
    fits = needed <= available - (limits.in_use - 1)  # the connection that asked is counted in use
    if limits.role_limit is not None:
        line += f", role {limits.role} limited to {limits.role_limit}"
        fits = fits and needed <= limits.role_limit
    line += f"; jit {limits.jit}."
    if not fits:
        line += f" WARNING: {what} needs {needed}: the schedulers or the API may be refused connections."
    return line, fits


def listen_connection_params() -> dict[str, Any]:
    """psycopg.connect's arguments for a LISTEN connection: LEASEHOLD_LISTEN_DATABASE_URL, else the database's own.

    Notifications reach only the session that ran LISTEN; a pooler in transaction mode hands each
    transaction some other server connection, so behind one the listener must connect directly.
    """
    from django.conf import settings
    from django.db import connections

    params: dict[str, Any] = dict(connections["default"].get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("prepare_threshold", None)
    url = settings.LEASEHOLD_LISTEN_DATABASE_URL
    if url:
        # The same session settings; the URL says where (host, port, user, password, database).
        params = {"conninfo": url, **{key: params[key] for key in ("options",) if key in params}}
    return params
