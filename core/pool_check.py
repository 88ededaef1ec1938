"""How a pooled PostgreSQL connection is checked before a request uses it (issue 34, SPEC §24).

psycopg_pool's own `check_connection` (what CONN_HEALTH_CHECKS gives it)
sends an empty statement every time a connection leaves the pool: one
database round trip per request (4 of part two's 37 per agent cycle).
`connection_fails_probe` sends it only when the connection is not known good:

- the socket has something to read while the connection sits idle: the
  server wrote to it unasked, which on a pooled connection (it LISTENs to
  nothing) is a termination notice or the end of the stream (a restart, a
  failover, `pg_terminate_backend`);
- libpq does not see it open and idle;
- it came back to the pool longer ago than `LEASEHOLD_DB_POOL_CHECK_IDLE_SECONDS`
  (settings: the database's `POOL_CHECK_IDLE_SECONDS`), or never came back
  yet (a NAT or firewall may drop an idle connection without a word).

A connection in steady use is handed out without a round trip; a dead one
still fails the probe and is replaced, as before (`core.postgresql`).
"""

from __future__ import annotations

import select
import time
from typing import Any

from psycopg import pq
from psycopg_pool import ConnectionPool

# Set on the connection when the pool takes it back (`note_returned`).
_RETURNED_AT = "_leasehold_returned_at"


def note_returned(conn: Any) -> None:
    """The pool's `reset` callback: when the connection came back (the pool checks its state itself)."""
    setattr(conn, _RETURNED_AT, time.monotonic())


def connection_fails_probe(conn: Any, *, idle_seconds: float) -> bool:
    """False for a connection known good or one that answers the probe; True for a dead one."""
    if known_good(conn, idle_seconds=idle_seconds):
        return False
    try:
        ConnectionPool.check_connection(conn)
    except Exception:  # whatever the probe raised, the connection is not usable
        return True
    return False


def known_good(conn: Any, *, idle_seconds: float) -> bool:
    returned_at = getattr(conn, _RETURNED_AT, None)
    if returned_at is None or time.monotonic() - returned_at > idle_seconds:
        return False
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return False
    readable, _, _ = select.select([pgconn.socket], [], [], 0)
    return not readable
