"""The pool's check (issue 34): no round trip for a connection known good, a probe that replaces a dead one."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from core.pool_check import connection_fails_probe, note_returned

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="exercises PostgreSQL connections")


def _connect() -> psycopg.Connection:
    database = connection.settings_dict
    return psycopg.connect(
        host=database["HOST"], port=database["PORT"], user=database["USER"], dbname="postgres", autocommit=True
    )


class Probes:
    """Counts the probes sent (psycopg_pool's check_connection runs `execute("")`)."""

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
    with _connect() as conn:
        note_returned(conn)
        with Probes(conn) as probes:
            assert not connection_fails_probe(conn, idle_seconds=5)
        assert probes.sent == 0


@postgres_only
def test_a_connection_never_returned_or_idle_too_long_is_probed():
    with _connect() as conn:
        with Probes(conn) as probes:
            assert not connection_fails_probe(conn, idle_seconds=5)  # new: never came back from a request
            note_returned(conn)
            assert not connection_fails_probe(conn, idle_seconds=0)  # idle longer than the setting allows
        assert probes.sent == 2


@postgres_only
def test_a_terminated_backend_fails_the_check_even_when_just_returned():
    with _connect() as conn, _connect() as admin:
        note_returned(conn)
        admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        # The server's notice reaches the socket asynchronously: wait for it (bounded), then check.
        select.select([conn.pgconn.socket], [], [], 5)
        assert connection_fails_probe(conn, idle_seconds=3600)


@postgres_only
def test_a_connection_left_in_a_transaction_is_not_known_good():
    with _connect() as conn:
        conn.autocommit = False
        conn.execute("SELECT 1")  # now INTRANS
        note_returned(conn)
        assert connection_fails_probe(conn, idle_seconds=5)  # the probe ran (and refused it)


@postgres_only
@pytest.mark.django_db
def test_a_request_after_its_pooled_connection_was_terminated_is_served(settings_pool):
    """The backend the next request would get is terminated: it is discarded and another is used."""
    from django.db import connections

    wrapper = connections.create_connection("default")
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (first_pid,) = cursor.fetchone()
    wrapper.close()  # back to the pool, known good
    with _connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [first_pid])
        # The backend exits (and closes its socket) just after the call returns: wait for it, bounded.
        for _ in range(500):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [first_pid]).fetchone():
                break
            select.select([], [], [], 0.01)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (second_pid,) = cursor.fetchone()
    wrapper.close()
    assert second_pid != first_pid


@pytest.fixture
def settings_pool():
    if settings.DATABASES["default"]["OPTIONS"].get("pool") is None:
        pytest.skip("this process connects without a pool")
    return settings.DATABASES["default"]["OPTIONS"]["pool"]


@postgres_only
def test_the_server_uses_the_lean_check(settings_pool):
    assert settings_pool["reset"] is note_returned
    assert settings.DATABASES["default"]["ENGINE"] == "core.postgresql"
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is False
