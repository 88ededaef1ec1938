"""Waiters under the real server (SPEC §18): parked in the worker's event loop, never holding its threads.

One `manage.py serve` (1 worker x 2 threads) on a database of its own
(SQLite, or a fresh PostgreSQL database when the tests run on PostgreSQL:
there the waiters wake on LISTEN/NOTIFY for real). 40 long-poll waiters and
several SSE clients at once must leave the two threads free for other
requests; a second server on the same database answers /metrics the same.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledger.models import EventType
from tests.served import Served, manage, server_database, serving

pytestmark = pytest.mark.slow

WAITERS = 40
STREAMS = 5
METRICS_TOKEN = "metrics-token-for-the-serve-test"


class Fleet:
    def __init__(self, server: Served, token: str, env: dict[str, str], data_dir: Path) -> None:
        self.server = server
        self.token = token
        self.env = env
        self.data_dir = data_dir

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 40, **headers: str):
        request = urllib.request.Request(  # noqa: S310 - our own server on loopback
            f"{self.server.url}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", **headers},
        )
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own server on loopback
            payload = response.read()
        return json.loads(payload) if payload else None, time.monotonic() - started

    def create_task(self, title: str) -> dict:
        return self.call("POST", "/api/v1/tasks/", {"project": "web", "title": title, "status": "ready"})[0]

    def latest(self) -> int:
        return self.call("GET", "/api/v1/changes/?since=0&limit=200")[0]["latest_event_id"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("changes-serve")
    with server_database(data_dir, "h19_changes") as env:
        env["LEASEHOLD_METRICS_TOKEN"] = METRICS_TOKEN
        env["LEASEHOLD_WAITERS_PER_AGENT"] = "100"  # forty waiters of one token: parking, not its bound, is tested here
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_project", "web", "--name", "Web")
        token = manage(env, "create_agent", "watcher", "--kind", "script", "--project", "web").strip().splitlines()[-1]
        with serving(env, data_dir / "serve.log", workers=1, threads=2) as server:
            yield Fleet(server, token, env, data_dir)


def test_forty_long_poll_waiters_hold_no_thread_and_all_wake_on_one_commit(fleet):
    since = fleet.latest()
    with ThreadPoolExecutor(WAITERS) as pool:
        waiters = [pool.submit(fleet.call, "GET", f"/api/v1/changes/?since={since}&wait=25") for _ in range(WAITERS)]
        time.sleep(2.0)  # they are all parked by now
        assert not any(w.done() for w in waiters)
        # Two threads, forty waiters: a plain request still gets a thread at once.
        _, took = fleet.call("GET", "/api/v1/projects/")
        assert took < 2.0, fleet.server.output()[-3000:]
        committed = time.monotonic()
        task = fleet.create_task("wake them all")
        answers = [w.result(timeout=20) for w in waiters]
    woke_after = time.monotonic() - committed
    assert woke_after < 10, woke_after
    for body, took in answers:
        assert [e["type"] for e in body["events"]][:1] == [EventType.TASK_CREATED]
        assert body["events"][0]["task"] == task["key"]
        assert took < 20


def test_a_waiter_answers_empty_at_its_deadline(fleet):
    since = fleet.latest()
    body, took = fleet.call("GET", f"/api/v1/changes/?since={since}&wait=2")
    assert body == {"events": [], "latest_event_id": since, "has_more": False}
    assert 1.9 < took < 4.0


class SseClient:
    """Reads an SSE stream off a real connection, message by message."""

    def __init__(self, fleet: Fleet, *, since: int = 0, last_event_id: int | None = None) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", fleet.server.port, timeout=25)
        headers = {"Authorization": f"Bearer {fleet.token}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.connection.request("GET", f"/api/v1/changes/stream/?since={since}", headers=headers)
        self.response = self.connection.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Content-Type") == "text/event-stream"
        self.comments = 0

    def next_ids(self, count: int, seconds: float = 15) -> list[int]:
        ids: list[int] = []
        deadline = time.monotonic() + seconds
        while len(ids) < count:
            assert time.monotonic() < deadline, ids
            line = self.response.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                ids.append(int(line[4:]))
            elif line.startswith(":"):
                self.comments += 1
        return ids

    def wait_comment(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.comments == 0:
            assert time.monotonic() < deadline
            if self.response.readline().decode().startswith(":"):
                self.comments += 1

    def close(self) -> None:
        self.connection.close()


def test_concurrent_streams_each_get_every_event_once_and_resume_without_gap(fleet):
    start = fleet.latest()
    clients = [SseClient(fleet, since=start) for _ in range(STREAMS)]
    created = [fleet.create_task(f"streamed {n}") for n in range(3)]
    expected = [e["id"] for e in fleet.call("GET", f"/api/v1/changes/?since={start}&limit=200")[0]["events"]]
    assert len(expected) >= len(created)
    got = [client.next_ids(len(expected)) for client in clients]
    assert all(ids == expected for ids in got)
    # Disconnect one, write meanwhile, and resume from its Last-Event-ID.
    clients[0].close()
    fleet.create_task("while away 1")
    fleet.create_task("while away 2")
    missed = [e["id"] for e in fleet.call("GET", f"/api/v1/changes/?since={expected[-1]}")[0]["events"]]
    resumed = SseClient(fleet, since=0, last_event_id=expected[-1])
    assert resumed.next_ids(len(missed)) == missed
    fleet.create_task("live again")
    (live,) = resumed.next_ids(1)
    assert live > missed[-1]
    for client in clients[1:]:
        assert client.next_ids(len(missed) + 1) == [*missed, live]  # the others saw everything, once
    # The streams are parked, not holding threads: a plain request answers at once.
    assert fleet.call("GET", "/api/v1/projects/")[1] < 2.0
    for client in [resumed, *clients[1:]]:
        client.close()


def test_an_idle_stream_gets_a_comment_line_within_fifteen_seconds(fleet):
    client = SseClient(fleet, since=fleet.latest())
    started = time.monotonic()
    client.wait_comment(20)
    assert 10 < time.monotonic() - started < 20
    client.close()


def scrape(url: str) -> dict:
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})  # noqa: S310 - our own server on loopback
    with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310 - our own server on loopback
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_two_servers_on_one_database_answer_metrics_the_same(fleet):
    fleet.create_task("counted")
    with serving(fleet.env, fleet.data_dir / "second.log", workers=1, threads=2) as second:
        first_view = scrape(fleet.server.url)
        second_view = scrape(second.url)
    volatile = {"leasehold_queue_wait_oldest_seconds"}  # grows with the clock between the two scrapes
    assert {k: v for k, v in first_view.items() if k[0] not in volatile} == {
        k: v for k, v in second_view.items() if k[0] not in volatile
    }
    assert first_view[("leasehold_tasks", (("effective_status", "ready"), ("project", "web")))] >= 1
    for key in first_view.keys() & second_view.keys():
        if key[0] in volatile:
            assert abs(first_view[key] - second_view[key]) < 5
