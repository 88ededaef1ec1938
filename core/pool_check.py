"""How the PostgreSQL pool checks a connection before handing it out (issue 34, SPEC §24).

psycopg_pool's own `check_connection` sends an empty statement every time a
connection leaves the pool: one database round trip per request (4 of part
two's 37 per agent cycle). `check_pooled_connection` sends it only when the
connection is not known good:

- the socket has something to read while the connection sits idle: the
  server wrote to it unasked, which on a pooled connection (it LISTENs to
  nothing) is a termination notice or the end of the stream (a restart, a
  failover, `pg_terminate_backend`);
- libpq does not see it open and idle;
- it sat in the pool longer than `LEASEHOLD_DB_POOL_CHECK_IDLE_SECONDS` (a
  NAT or firewall may drop an idle connection without a word).

A connection in steady use is handed out without a round trip; a dead one
still fails the probe and the pool replaces it, as before.
"""

from __future__ import annotations

import select
import time
from typing import Any

from psycopg import pq
from psycopg_pool import ConnectionPool

# Set on the connection when the pool takes it back (`note_returned`).
_RETURNED_AT = "_leasehold_returned_at"


def check_pooled_connection_after(idle_seconds: float) -> Any:
    """The pool's `check` callback: probe only what is not known good (see the module docstring)."""

    def check(conn: Any) -> None:
        if not _known_good(conn, idle_seconds=idle_seconds):
            ConnectionPool.check_connection(conn)

    return check


def note_returned(conn: Any) -> None:
    """The pool's `reset` callback: when the connection came back (its state is checked by the pool)."""
    setattr(conn, _RETURNED_AT, time.monotonic())


def _known_good(conn: Any, *, idle_seconds: float) -> bool:
    returned_at = getattr(conn, _RETURNED_AT, None)
    if returned_at is None or time.monotonic() - returned_at > idle_seconds:
        return False
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return False
    readable, _, _ = select.select([pgconn.socket], [], [], 0)
    return not readable
