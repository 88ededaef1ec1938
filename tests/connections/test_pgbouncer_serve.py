"""A real `serve` behind a real PgBouncer in transaction mode (SPEC §25): claim wait, claim, renew, finish.

PostgreSQL only (SQLite has nothing to pool). The server's database connections go through
PgBouncer (`LEASEHOLD_DB_TRANSACTION_POOLING=1`: no startup options, no server-side cursors or
prepared statements), and its LISTEN connection straight to PostgreSQL
(`LEASEHOLD_LISTEN_DATABASE_URL`): a claim that waits is woken by the task created after it.
The session settings the server cannot send through PgBouncer (`jit`, `lock_timeout`) are the
database's (`ALTER DATABASE ... SET`, as docs/operations.md says for the role).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from bench.pgbouncer import pgbouncer_binary, running_pgbouncer
from ledger.models import EventType
from tests.api.test_claim_wait_serve import call
from tests.served import manage, server_database, serving

pytestmark = pytest.mark.slow
POOL_SIZE = 2  # PgBouncer's server connections: fewer than the server's pool (1 x (2 + 1))


def test_a_claim_waits_is_woken_renews_and_finishes_through_pgbouncer(tmp_path):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("PgBouncer pools PostgreSQL connections; SQLite has none")
    assert pgbouncer_binary() is not None, "pgbouncer is missing: scripts/install-debian-package pgbouncer pgbouncer"
    with server_database(tmp_path, "pgbouncer_serve") as env:
        direct = env["DATABASE_URL"]
        database = direct.rsplit("/", 1)[1]
        with psycopg.connect(direct, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{database}" SET jit = off')
            admin.execute(f"ALTER DATABASE \"{database}\" SET lock_timeout = '20s'")
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_project", "web", "--name", "Web")
        token = manage(env, "create_agent", "waiter", "--kind", "script", "--project", "web").strip().splitlines()[-1]
        maker = manage(env, "create_agent", "maker", "--kind", "script", "--project", "web").strip().splitlines()[-1]
        with running_pgbouncer(direct, pool_size=POOL_SIZE) as bouncer:
            pooled = {
                **env,
                "DATABASE_URL": bouncer.url(direct),
                "LEASEHOLD_DB_TRANSACTION_POOLING": "1",
                "LEASEHOLD_LISTEN_DATABASE_URL": direct,
            }
            with serving(pooled, tmp_path / "serve.log", workers=1, threads=2) as server:
                assert "Connections: web 1 x (2 threads + 1 resume + 1 listener) = 4" in server.output()
                assert "jit off" in server.output()
                with ThreadPoolExecutor(1) as pool:
                    wait = {"project": "web", "wait": 15}
                    waiter = pool.submit(call, server.url, token, "POST", "/api/v1/claims/next/", wait)
                    time.sleep(2.0)
                    assert not waiter.done(), server.output()[-3000:]
                    status, task, _ = call(
                        server.url, maker, "POST", "/api/v1/tasks/", {"project": "web", "title": "t", "status": "ready"}
                    )
                    assert status == 201
                    status, claim, took = waiter.result(timeout=10)
                assert status == 201, claim
                assert claim["task"]["key"] == task["key"]
                assert 2.0 < took < 8.0  # woken by the NOTIFY on the direct connection, not at its deadline

                holder = {"lease_token": claim["lease_token"], "epoch": claim["epoch"]}
                attempt = f"/api/v1/attempts/{claim['attempt']['id']}"
                for _ in range(3):  # several transactions, each on whichever server connection PgBouncer gives
                    status, renewed, _ = call_as(server.url, token, f"{attempt}/renew/", {}, holder)
                    assert status == 200, renewed
                status, finished, _ = call_as(
                    server.url, token, f"{attempt}/finish/", {"outcome": "done", "result_summary": "ok"}, holder
                )
                assert status == 200, finished
                status, feed, _ = call(server.url, maker, "GET", "/api/v1/changes/?project=web")
                assert status == 200
                assert any(event["type"] == EventType.ATTEMPT_FINISHED for event in feed["events"]), feed

                with psycopg.connect(direct, autocommit=True) as probe:
                    through_bouncer, listening = probe.execute(
                        "SELECT count(*) FILTER (WHERE query NOT LIKE 'LISTEN%%'),"
                        " count(*) FILTER (WHERE query LIKE 'LISTEN%%')"
                        " FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                        [database],
                    ).fetchone()
                assert through_bouncer <= POOL_SIZE  # however many the server's pool holds
                assert listening == 1
        assert "unsupported startup parameter" not in bouncer.log()


def call_as(url: str, token: str, path: str, body: dict, holder: dict):
    """A holder's call: the lease headers with the bearer token."""
    request = urllib.request.Request(  # noqa: S310 - our own server on loopback
        f"{url}{path}",
        method="POST",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "X-Lease-Token": holder["lease_token"],
            "X-Lease-Epoch": str(holder["epoch"]),
        },
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own server on loopback
            return response.status, json.loads(response.read() or b"null"), time.monotonic() - started
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace"), time.monotonic() - started
