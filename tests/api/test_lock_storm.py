"""A lock storm on SQLite with an outside lock holder, through the real server (issue 14, finding 2).

Four writer processes' worth of clients hit `manage.py serve` while something
outside Leasehold holds SQLite's write lock past every wait. Each request
must end in `STORAGE_BUSY` (JSON 503, retryable) within the request's storage
deadline: no HTML 500, no dropped connection, no killed worker; and once the
lock is gone, writes go through.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest

from tests.agent.live import LiveServer

DEADLINE_SECONDS = 3


@pytest.fixture
def server(tmp_path):
    live = LiveServer(tmp_path / "server")
    live.env["LEASEHOLD_STORAGE_DEADLINE_SECONDS"] = str(DEADLINE_SECONDS)
    live.start()
    live.manage("create_project", "web", "--name", "Web")
    yield live
    live.stop()


def test_an_outside_lock_holder_gets_storage_busy_within_the_deadline_never_a_500(server):
    token = server.create_agent("storm", project="web")
    outside = sqlite3.connect(server.data_dir / "leasehold.sqlite3", isolation_level=None)
    outside.execute("BEGIN IMMEDIATE")  # held past everything the server would wait
    answers: list[tuple[int, str, float]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            for i in range(2):
                started = time.monotonic()
                response = http.post("/api/v1/tasks/", json={"project": "web", "title": f"storm {n}.{i}"})
                with lock:
                    answers.append((response.status_code, response.text, time.monotonic() - started))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    storm_started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    storm_seconds = time.monotonic() - storm_started
    outside.rollback()
    outside.close()

    assert len(answers) == 8  # every request answered: no dropped connection
    for status, body, _ in answers:
        assert status == 503, body[:300]
        assert '"code":"STORAGE_BUSY"' in body
        assert '"retryable":true' in body
    # Each request gives up at its deadline (requests queued for a worker wait their turn first).
    assert DEADLINE_SECONDS - 0.5 <= min(elapsed for _, _, elapsed in answers) < DEADLINE_SECONDS + 2
    assert storm_seconds < len(answers) * (DEADLINE_SECONDS + 1.5)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        assert http.post("/api/v1/tasks/", json={"project": "web", "title": "after the storm"}).status_code == 201
