"""The agent API's one kept-alive connection (`agent.client.wire.KeepAliveWire`) and what happens when it drops.

The first tests run against a scripted HTTP server on a real socket, which
can answer, close an idle connection, or drop one mid-call; the last ones
against the live server, stopped and started again on the same port, with
the client (and `leasehold mcp`) kept running across the restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from agent.client import LeaseholdClient
from agent.client.errors import ConnectionFailed
from agent.client.wire import HttpxWire, KeepAliveWire
from tests.agent.live import LiveServer
from tests.agent.mcp_client import Session, with_session

ANSWER = {"agent": "scripted-1"}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which accepted connection it came on, from 1


@dataclass
class ScriptedServer:
    """HTTP/1.1 on 127.0.0.1: `behaviour(n)` for the n-th request (from 1): "answer", "drop", "close-after", "hang"."""

    behaviour: dict[int, str] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    accepted: int = 0
    closed: int = 0

    def __post_init__(self) -> None:
        self._closing = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._sockets.append(sock)
            threading.Thread(target=self._serve, args=(sock, self.accepted), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        reader = sock.makefile("rb")
        try:
            while True:
                request_line = reader.readline()
                if not request_line:
                    return
                method, target, _ = request_line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (line := reader.readline()) not in (b"\r\n", b""):
                    name, value = line.decode().split(":", 1)
                    headers[name.strip().lower()] = value.strip()
                body = reader.read(int(headers.get("content-length", "0")))
                self.seen.append(Seen(method, target, headers, body, number))
                what = self.behaviour.get(len(self.seen), "answer")
                if what == "drop":
                    return  # closed without a word, the request read: the server died mid-call
                if what == "hang":
                    self._stopping.wait(30)
                    return
                payload = json.dumps(ANSWER).encode()
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                if what == "close-after":
                    return  # an idle keep-alive connection the server closes (its keep-alive ran out)
        except OSError:
            return
        finally:
            reader.close()
            sock.close()
            with self._closing:
                self.closed += 1
                self._closing.notify_all()

    def wait_closed(self, count: int) -> None:
        """Until `count` connections have been closed by this side."""
        with self._closing:
            assert self._closing.wait_for(lambda: self.closed >= count, timeout=5)

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    yield server
    server.stop()


def client_of(server: ScriptedServer, **options) -> LeaseholdClient:
    return LeaseholdClient(server.url, "agent-token", sleep=lambda seconds: None, **options)


def test_calls_go_over_one_kept_alive_connection_with_the_same_headers_httpx_sent(scripted):
    with client_of(scripted) as client:
        assert isinstance(client._wire, KeepAliveWire)
        for _ in range(5):
            assert client.heartbeat() == ANSWER
        client.tasks(project="web", ready=True, limit=3)
        (kept,) = client._wire._idle
        assert kept.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # as httpx: no write waits for an ACK
    assert scripted.accepted == 1
    assert [seen.connection for seen in scripted.seen] == [1] * 6
    first = scripted.seen[0]
    assert (first.method, first.path) == ("POST", "/api/v1/agents/me/heartbeat/")
    assert first.headers["authorization"] == "Bearer agent-token"
    assert first.headers["accept"] == "application/json"
    assert first.headers["user-agent"].startswith("leasehold-agent/")
    assert first.headers["idempotency-key"].startswith("lh-")
    assert first.headers["content-length"] == "0"
    assert scripted.seen[-1].path == "/api/v1/tasks/?project=web&limit=3&ready=true"


def test_a_json_body_is_sent_as_httpx_sent_it(scripted):
    with client_of(scripted) as client:
        client.create_task("web", "Ünïcode title", status="ready", priority=3)
    (seen,) = scripted.seen
    assert seen.headers["content-type"] == "application/json"
    assert json.loads(seen.body) == {"project": "web", "title": "Ünïcode title", "status": "ready", "priority": 3}
    assert seen.body == json.dumps(json.loads(seen.body), ensure_ascii=False, separators=(",", ":")).encode()


def test_an_idle_connection_the_server_closed_is_replaced_before_the_next_call_with_no_request_repeated(scripted):
    scripted.behaviour = {1: "close-after", 2: "close-after"}
    with client_of(scripted) as client:
        client.heartbeat()
        scripted.wait_closed(1)  # closed while idle: seen closed before it is used, not sent on
        client.heartbeat()
        scripted.wait_closed(2)
        client.heartbeat()
    assert [seen.connection for seen in scripted.seen] == [1, 2, 3]
    assert len({seen.headers["idempotency-key"] for seen in scripted.seen}) == 3


def test_a_kept_connection_that_drops_mid_call_is_sent_again_once_on_a_fresh_one_with_the_same_key(scripted):
    scripted.behaviour = {2: "drop"}
    with client_of(scripted, max_retries=0) as client:
        client.heartbeat()
        assert client.heartbeat() == ANSWER  # no retry budget: the fresh-connection resend is the wire's own
    assert [seen.connection for seen in scripted.seen] == [1, 1, 2]
    assert scripted.seen[1].headers["idempotency-key"] == scripted.seen[2].headers["idempotency-key"]


def test_a_server_that_keeps_dropping_answers_connection_failed_after_the_bounded_retries(scripted):
    scripted.behaviour = dict.fromkeys(range(1, 20), "drop")
    with client_of(scripted, max_retries=2) as client, pytest.raises(ConnectionFailed) as raised:
        client.heartbeat()
    assert "POST /agents/me/heartbeat/" in raised.value.message
    assert raised.value.code == "CONNECTION_FAILED"
    assert len(scripted.seen) == 3  # a fresh connection each time: no kept one to resend on
    assert len({seen.headers["idempotency-key"] for seen in scripted.seen}) == 1


def test_a_server_that_never_answers_is_given_up_on_at_the_timeout_not_waited_for(scripted):
    scripted.behaviour = {1: "hang"}
    started = time.monotonic()
    with client_of(scripted, timeout=0.5, max_retries=0) as client, pytest.raises(ConnectionFailed) as raised:
        client.heartbeat()
    assert time.monotonic() - started < 3
    assert "timed out" in raised.value.message


def test_threads_calling_at_once_each_get_a_connection_and_all_are_kept_for_later(scripted):
    with client_of(scripted) as client:
        barrier = threading.Barrier(3)

        def call() -> None:
            barrier.wait()
            client.heartbeat()

        threads = [threading.Thread(target=call) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        accepted = scripted.accepted
        for _ in range(6):
            client.heartbeat()
    assert len(scripted.seen) == 9
    assert scripted.accepted == accepted <= 3  # the later calls found kept connections


def test_an_injected_transport_or_an_observer_still_goes_through_httpx(scripted):
    with client_of(scripted, on_request=lambda request: None) as client:
        assert isinstance(client._wire, HttpxWire)
        assert client.heartbeat() == ANSWER


def test_a_configured_proxy_is_honoured_through_httpx(scripted, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "")
    with client_of(scripted) as client:
        assert isinstance(client._wire, HttpxWire)


# --- the live server, stopped and started again ------------------------------------------------------


@pytest.fixture
def restartable(fleet) -> Iterator[list[LiveServer]]:
    """A server on the suite's database that the test stops and starts again on the same port (last is current)."""
    servers = [LiveServer(fleet.server.data_dir, same_database_as=fleet.server).start()]
    yield servers
    servers[-1].stop()


def kill_hard(server: LiveServer) -> None:
    """SIGKILL the server and its gunicorn (a session of its own, so not in the server's group): no goodbye."""
    assert server.process is not None
    family = {server.process.pid}
    for _ in range(3):  # serve -> gunicorn master -> workers
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2 :].split()[1]) in family:
                    family.add(int(entry.name))
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    server.process.wait()


def restart(servers: list[LiveServer], fleet) -> None:
    port = servers[-1].port
    servers.append(LiveServer(fleet.server.data_dir, port=port, same_database_as=fleet.server).start())


def test_a_client_kept_across_a_killed_server_answers_connection_failed_while_it_is_down_then_reconnects(
    fleet, restartable
):
    key = fleet.ready_task()
    client = LeaseholdClient(restartable[-1].url, fleet.token, sleep=lambda seconds: None)
    claim = client.claim(key)
    client.note(claim.lease, "the kept connection is open")
    kill_hard(restartable[-1])
    started = time.monotonic()
    with pytest.raises(ConnectionFailed):
        client.note(claim.lease, "the server is gone")
    assert time.monotonic() - started < 5
    restart(restartable, fleet)
    written = client.note(claim.lease, "the server is back")
    assert written["note"]["id"]
    finished = client.finish(claim.lease, "done", result_summary="across a restart")
    assert finished["attempt"]["status"] == "completed"
    notes = [note["excerpt"] for note in client.attempt(claim.lease.attempt_id)["notes"]]
    assert notes == ["the kept connection is open", "the server is back"]
    client.close()


def test_leasehold_mcp_answers_connection_failed_while_the_server_is_down_and_carries_on_once_it_is_back(
    fleet, restartable, logged_in
):
    config = Path(logged_in["LEASEHOLD_CONFIG"])
    config.write_text(json.dumps({"url": restartable[-1].url, "token": fleet.token, "project": fleet.project}))
    key = fleet.ready_task()

    async def work(session: Session) -> tuple[str, float, int]:
        claimed = await session.json("claim", {"key": key})
        assert claimed["task"] == key
        await session.json("checkpoint", {"content": "before the restart"})
        restartable[-1].stop()
        started = time.monotonic()
        failed, text = await session.call("checkpoint", {"content": "while the server is down"})
        waited = time.monotonic() - started
        assert failed, text
        restart(restartable, fleet)
        await session.json("checkpoint", {"content": "after the restart"})
        ended = await session.json("finish", {"outcome": "done", "summary": "across a restart"})
        assert ended["status"] == "completed"
        return text, waited, claimed["attempt"]

    text, waited, attempt = anyio.run(with_session, logged_in, work)
    assert f"CONNECTION_FAILED: POST /attempts/{attempt}/notes/: " in text
    assert waited < 10  # the retries are bounded: a clear error, not a hang
    with fleet.client() as api:
        notes = [note["excerpt"] for note in api.attempt(attempt)["notes"]]
    assert notes == ["before the restart", "after the restart"]
