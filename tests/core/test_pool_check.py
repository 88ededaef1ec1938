"""The pool's check (issue 34): no round trip for a connection known good, a probe that replaces a dead one."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from core.pool_check import check_pooled_connection_after, note_returned

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="exercises PostgreSQL connections")


def _connect() -> psycopg.Connection:
    database = connection.settings_dict
    return psycopg.connect(
        host=database["HOST"], port=database["PORT"], user=database["USER"], dbname="postgres", autocommit=True
    )


class Probes:
    """Counts the probes `check` sends (psycopg_pool's check_connection runs `execute("")`)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.sent = 0
        self.conn = conn
        self._execute = conn.execute

    def __enter__(self) -> Probes:
        def counting(query, *args, **kwargs):
            self.sent += 1
            return self._execute(query, *args, **kwargs)

        self.conn.execute = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.conn.execute


@postgres_only
def test_a_connection_back_from_a_request_moments_ago_is_handed_out_without_a_round_trip():
    check = check_pooled_connection_after(5)
    with _connect() as conn:
        note_returned(conn)
        with Probes(conn) as probes:
            check(conn)
        assert probes.sent == 0


@postgres_only
def test_a_connection_never_returned_or_idle_too_long_is_probed():
    with _connect() as conn:
        with Probes(conn) as probes:
            check_pooled_connection_after(5)(conn)  # new: never came back from a request
            note_returned(conn)
            check_pooled_connection_after(0)(conn)  # idle longer than the setting allows
        assert probes.sent == 2


@postgres_only
def test_a_terminated_backend_fails_the_check_and_is_not_handed_out():
    check = check_pooled_connection_after(3600)
    with _connect() as conn, _connect() as admin:
        note_returned(conn)
        admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        # The server's notice reaches the socket asynchronously: wait for it (bounded), then check.
        select.select([conn.pgconn.socket], [], [], 5)
        with pytest.raises(psycopg.OperationalError):
            check(conn)


@postgres_only
def test_the_server_pool_uses_the_lean_check():
    pool = settings.DATABASES["default"]["OPTIONS"].get("pool")
    if pool is None:
        pytest.skip("this process connects without a pool (the cluster's settings)")
    assert pool["reset"] is note_returned
    assert pool["check"].__qualname__.startswith("check_pooled_connection_after")
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is False


@postgres_only
def test_a_busy_connection_is_not_known_good_even_when_just_returned():
    """Only an idle connection skips the probe (a transaction left open is the pool's to roll back)."""
    with _connect() as conn:
        conn.autocommit = False
        conn.execute("SELECT 1")  # now INTRANS
        note_returned(conn)
        with Probes(conn) as probes, pytest.raises(psycopg.ProgrammingError):
            check_pooled_connection_after(5)(conn)  # psycopg_pool's probe refuses a connection in a transaction
        assert probes.sent == 0  # it failed before sending: the probe ran, not the shortcut
