"""Claim waiters under the real server (SPEC §25): parked in the worker's event loop, one task, one answer.

One `manage.py serve` (1 worker x 2 threads) on a database of its own (SQLite, or a fresh PostgreSQL
database when the tests run on PostgreSQL: there the waiters wake on LISTEN/NOTIFY for real). Thirty
agents wait on claims/next: they hold neither thread, each task created goes to exactly one of them
within moments (the parked POST runs again with its body), and the rest answer 204 at their deadline.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from tests.served import manage, server_database, serving

pytestmark = pytest.mark.slow

WAITERS = 30
WAIT_SECONDS = 10


def call(url: str, token: str, method: str, path: str, body: dict | None = None):
    request = urllib.request.Request(  # noqa: S310 - our own server on loopback
        f"{url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=40) as response:  # noqa: S310 - our own server on loopback
        payload = response.read()
        status = response.status
    return status, (json.loads(payload) if payload else None), time.monotonic() - started


def test_thirty_parked_claim_waiters_each_task_to_exactly_one_the_rest_204(tmp_path):
    with server_database(tmp_path, "claim_wait_serve") as env:
        env["LEASEHOLD_WAITERS_PER_AGENT"] = "100"  # thirty waiters of one token: parking, not its bound
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_project", "web", "--name", "Web")
        token = manage(env, "create_agent", "waiter", "--kind", "script", "--project", "web").strip().splitlines()[-1]
        maker = manage(env, "create_agent", "maker", "--kind", "script", "--project", "web").strip().splitlines()[-1]
        with serving(env, tmp_path / "serve.log", workers=1, threads=2) as server:
            body = {"project": "web", "wait": WAIT_SECONDS}
            with ThreadPoolExecutor(WAITERS) as pool:
                waiters = [
                    pool.submit(call, server.url, token, "POST", "/api/v1/claims/next/", body) for _ in range(WAITERS)
                ]
                time.sleep(2.0)  # all parked by now
                assert not any(w.done() for w in waiters), server.output()[-3000:]
                _, _, took = call(server.url, maker, "GET", "/api/v1/projects/")
                assert took < 2.0  # two threads, thirty waiters: a plain request still gets a thread

                ready = {"project": "web", "title": "one", "status": "ready"}
                _, first, _ = call(server.url, maker, "POST", "/api/v1/tasks/", ready)
                done, _ = wait(waiters, timeout=5, return_when="FIRST_COMPLETED")
                assert len(done) == 1, server.output()[-3000:]
                time.sleep(1.0)
                assert sum(w.done() for w in waiters) == 1  # one task, one answer: the others wait on

                made = [first["key"]]
                for title in ("two", "three", "four"):
                    task = call(
                        server.url,
                        maker,
                        "POST",
                        "/api/v1/tasks/",
                        {"project": "web", "title": title, "status": "ready"},
                    )[1]
                    made.append(task["key"])
                answers = [w.result(timeout=WAIT_SECONDS + 10) for w in waiters]
    claimed = [answer["task"]["key"] for status, answer, _ in answers if status == 201]
    assert sorted(claimed) == sorted(made)
    late = [took for status, _, took in answers if status == 204]
    assert len(late) == WAITERS - len(made)
    assert all(WAIT_SECONDS - 0.5 < took < WAIT_SECONDS + 5 for took in late)
