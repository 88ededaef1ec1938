"""One token cannot take the server down with waiters (issue 27, H2), under the real server with real sockets.

One `manage.py serve` (1 worker x 4 threads: one resume thread) whose worker holds 120
connections (`GUNICORN_CMD_ARGS`), so a few hundred sockets make the point
that 2,100 made against two workers of 1,000. Before the bound, 150 parked
streams of one token filled every connection slot and the other agent's
renewals never got an answer.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from ledger.models import EventType
from tests.served import Served, manage, server_database, serving

pytestmark = pytest.mark.slow

WORKER_CONNECTIONS = 120  # waiters may take half: 60
PER_AGENT = 20


def call(server: Served, token: str, method: str, path: str, body: dict | None = None, **headers: str):
    request = urllib.request.Request(  # noqa: S310 - our own server on loopback
        f"{server.url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our own server on loopback
        payload = response.read()
    return json.loads(payload), time.monotonic() - started


def open_waiter(
    server: Served, token: str, path: str, accept: str = "text/event-stream"
) -> tuple[socket.socket, int, bytes]:
    """Send one GET and read the status line (and, for a refusal, the body); the socket stays open."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nAccept: {accept}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, head
        head += chunk
    status = int(head.split(b" ", 2)[1])
    return sock, status, head


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("waiters-bounded")
    with server_database(data_dir, "h27_waiters") as env:
        env["GUNICORN_CMD_ARGS"] = f"--worker-connections {WORKER_CONNECTIONS}"
        env["LEASEHOLD_WAITERS_PER_AGENT"] = str(PER_AGENT)
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_project", "web", "--name", "Web")
        tokens = {}
        for handle in ("flooder", "worker", "c1", "c2", "c3", "c4"):
            out = manage(env, "create_agent", handle, "--kind", "script", "--project", "web")
            tokens[handle] = out.strip().splitlines()[-1]
        with serving(env, data_dir / "serve.log", workers=1, threads=4) as server:
            _envs[server.port] = env
            yield server, tokens


_envs: dict[int, dict[str, str]] = {}


def site_env(server: Served) -> dict[str, str]:
    return _envs[server.port]


def renewals_answer_quickly(server: Served, token: str, title: str) -> list[float]:
    task, _ = call(server, token, "POST", "/api/v1/tasks/", {"project": "web", "title": title, "status": "ready"})
    claim, took = call(server, token, "POST", f"/api/v1/tasks/{task['key']}/claim/", {"lease_seconds": 600})
    times = [took]
    holder = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}
    for _ in range(5):
        renewed, took = call(server, token, "POST", f"/api/v1/attempts/{claim['attempt']['id']}/renew/", {}, **holder)
        assert renewed["renew_count"] >= 1
        times.append(took)
    return times


def test_one_token_parks_its_share_of_streams_and_the_rest_are_refused_while_renewals_answer(site):
    server, tokens = site
    with ExitStack() as stack, ThreadPoolExecutor(50) as pool:
        opened = list(pool.map(lambda _: open_waiter(server, tokens["flooder"], "/api/v1/changes/stream/"), range(150)))
        for sock, _, _ in opened:
            stack.callback(sock.close)
        statuses = [status for _, status, _ in opened]
        assert statuses.count(200) == PER_AGENT, statuses
        assert statuses.count(429) == 150 - PER_AGENT, statuses
        refused = next(head for _, status, head in opened if status == 429)
        assert b'"RATE_LIMITED"' in refused + opened[statuses.index(429)][0].recv(4096)
        # Long-polls count against the same bound.
        poll, status, _ = open_waiter(server, tokens["flooder"], "/api/v1/changes/?wait=20&tail=true", "*/*")
        poll.close()
        assert status == 429
        times = renewals_answer_quickly(server, tokens["worker"], "renewed while flooded")
        assert max(times) < 1.0, times
    # The streams are closed: their slots come back, and the flooder may wait again.
    until_admitted(server, tokens["flooder"])


def until_admitted(server: Served, token: str) -> None:
    """A stream of this token is admitted again within 10 s (the server notices closed sockets on its own)."""
    deadline = time.monotonic() + 10
    while True:
        sock, status, _ = open_waiter(server, token, "/api/v1/changes/stream/")
        sock.close()
        if status == 200:
            return
        assert time.monotonic() < deadline, status
        time.sleep(0.3)


def test_waiters_of_many_agents_leave_half_the_connections_to_ordinary_requests(site):
    server, tokens = site
    with ExitStack() as stack, ThreadPoolExecutor(40) as pool:
        jobs = [(tokens[h], "/api/v1/changes/stream/") for h in ("c1", "c2", "c3", "c4") for _ in range(PER_AGENT)]
        opened = list(pool.map(lambda job: open_waiter(server, *job), jobs))
        for sock, _, _ in opened:
            stack.callback(sock.close)
        statuses = [status for _, status, _ in opened]
        assert statuses.count(200) == WORKER_CONNECTIONS // 2, statuses
        assert statuses.count(429) == len(jobs) - WORKER_CONNECTIONS // 2
        times = renewals_answer_quickly(server, tokens["worker"], "renewed beside a full parking lot")
        assert max(times) < 1.0, times
    for handle in ("c1", "c2", "c3", "c4"):
        until_admitted(server, tokens[handle])


BIG_EVENTS = """
from ledger import clock
from ledger.models import Event, Project
web = Project.objects.get(slug="web")
blob = {"blob": "x" * 200_000}
Event.objects.bulk_create(
    Event(type="task.updated", project=web, payload=blob, created_at=clock.now()) for _ in range(30)
)
"""


def test_streams_that_never_read_do_not_delay_other_waiters(site):
    """M5: eight streams with full buffers and a 6 MB message each; a long-poll still wakes within seconds."""
    server, tokens = site
    latest, _ = call(server, tokens["worker"], "GET", "/api/v1/changes/?tail=true")
    with ExitStack() as stack:
        for _ in range(8):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            stack.callback(sock.close)
            sock.sendall(
                f"GET /api/v1/changes/stream/?since={latest['latest_event_id']} HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {tokens['c1']}\r\n\r\n".encode()
            )  # and never read
        # One stream that does read gets every big message, sent from the event loop as it reads.
        reader = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        stack.callback(reader.close)
        reader.request(
            "GET",
            f"/api/v1/changes/stream/?since={latest['latest_event_id']}",
            headers={"Authorization": f"Bearer {tokens['c2']}"},
        )
        stream = reader.getresponse()
        assert stream.status == 200
        ids: list[int] = []

        def read_thirty() -> None:
            while len(ids) < 30:
                line = stream.readline()
                if not line:
                    return
                if line.startswith(b"id: "):
                    ids.append(int(line[4:]))

        reading = threading.Thread(target=read_thirty)
        reading.start()
        time.sleep(1.0)
        manage(site_env(server), "shell", "-c", BIG_EVENTS)
        time.sleep(2.0)  # the streams are woken and their writes under way
        since, _ = call(server, tokens["worker"], "GET", "/api/v1/changes/?tail=true")
        with ThreadPoolExecutor(1) as pool:
            waiter = pool.submit(
                call, server, tokens["worker"], "GET", f"/api/v1/changes/?since={since['latest_event_id']}&wait=25"
            )
            time.sleep(0.5)
            committed = time.monotonic()
            call(server, tokens["worker"], "POST", "/api/v1/tasks/", {"project": "web", "title": "seen at once"})
            body, _ = waiter.result(timeout=60)
        assert [e["type"] for e in body["events"]] == [EventType.TASK_CREATED]
        assert time.monotonic() - committed < 3.0
        reading.join(timeout=30)
        assert len(ids) == 30
        assert ids == sorted(set(ids))
