"""Slow clients cannot freeze `manage.py serve` (issue 14, finding 4; config/gunicorn.py).

One real server (1 worker x 4 threads, SQLite in a temp dir) for the module;
every client is a raw socket on 127.0.0.1 and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.test_serve import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
THREADS = 4
HEAD_TIMEOUT = 4.0
BODY_TIMEOUT = 8.0
SOCKET_TIMEOUT = 3.0
HALF_HEAD = b"GET /api/v1/projects/ HTTP/1.1\r\nHost: x\r\n"


class Server:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("serve")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(data_dir), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    port = free_port()
    log = data_dir / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "serve",
                "--no-cluster",
                "--port",
                str(port),
                "--workers",
                "1",
                "--threads",
                str(THREADS),
                "--head-timeout",
                str(HEAD_TIMEOUT),
                "--body-timeout",
                str(BODY_TIMEOUT),
                "--socket-timeout",
                str(SOCKET_TIMEOUT),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Server(port, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, running.output()
            try:
                status, _ = get(running, "/admin/login/")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, running.output()
                time.sleep(0.3)
                continue
            assert status == 200, running.output()
            break
        yield running
    finally:
        process.terminate()
        process.wait(timeout=60)


def get(server: Server, path: str) -> tuple[int, float]:
    """Status and seconds taken of a plain request (an error status is an answer too)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=15) as response:
            response.read()
            status = int(response.status)
    except urllib.error.HTTPError as error:
        status = error.code
    return status, time.monotonic() - started


class Responses:
    """Reads HTTP responses off one socket, keeping what arrives past one for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = b""

    def _more(self, deadline: float, what: str) -> None:
        self.sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = self.sock.recv(65536)
        assert chunk, f"connection closed {what}: {self.pending!r}"
        self.pending += chunk

    def next(self, seconds: float = 10) -> tuple[int, bytes]:
        """The next response (status, body, the body by Content-Length) within `seconds`."""
        deadline = time.monotonic() + seconds
        while b"\r\n\r\n" not in self.pending:
            self._more(deadline, "before a response head")
        head, _, rest = self.pending.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = (line.partition(":") for line in lines[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        length = int(headers.get("content-length", "0"))
        self.pending = rest
        while len(self.pending) < length:
            self._more(deadline, "inside a response body")
        body, self.pending = self.pending[:length], self.pending[length:]
        return int(lines[0].split()[1]), body


def wait_closed(sock: socket.socket, deadline: float) -> tuple[bytes, float]:
    """Everything the server still sends until it closes the connection, and when it closed it."""
    received = b""
    while True:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return received, time.monotonic()
        received += chunk


def is_open(sock: socket.socket) -> bool:
    """The server has neither closed the connection nor sent anything on it."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)
    return False


def test_more_half_sent_heads_than_threads_do_not_hold_up_the_admin_or_the_api(server):
    storm = []
    try:
        for _ in range(10 * THREADS):
            sock = server.connect()
            sock.sendall(HALF_HEAD)
            storm.append(sock)
        time.sleep(0.3)  # let the server read what the storm sent

        admin_status, admin_seconds = get(server, "/admin/login/")
        api_status, api_seconds = get(server, "/api/v1/projects/")

        assert admin_status == 200
        assert api_status == 401  # answered: no credentials
        assert admin_seconds < 2, admin_seconds
        assert api_seconds < 2, api_seconds
        # Answered while the storm is still connected, not after the server dropped it.
        assert all(is_open(sock) for sock in storm)
    finally:
        for sock in storm:
            sock.close()


def test_a_half_sent_head_is_closed_after_the_head_timeout_and_nothing_else_is(server):
    stalled = server.connect()
    trickled_head = server.connect()
    slow_body = server.connect()
    body = b"username=someone&password=wrong-password"
    watched: list[tuple[bytes, float]] = []
    started = time.monotonic()
    watcher = threading.Thread(target=lambda: watched.append(wait_closed(stalled, started + HEAD_TIMEOUT + 10)))
    try:
        stalled.sendall(HALF_HEAD)
        watcher.start()
        # A complete head (then a body) that takes longer than the head
        # timeout in total: the head timeout only bounds the head.
        slow_body.sendall(
            b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        # A head sent in pieces, each within the socket timeout, complete
        # before the head timeout.
        pieces = [b"GET /admin/login/ HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"Accept: */*\r\n", b"\r\n"]
        for piece in pieces:
            trickled_head.sendall(piece)
            time.sleep(HEAD_TIMEOUT / 2 / len(pieces))
        status, _ = Responses(trickled_head).next()
        assert status == 200

        for index in range(0, len(body), 10):
            slow_body.sendall(body[index : index + 10])
            time.sleep((HEAD_TIMEOUT + 1) / (len(body) / 10))
        assert time.monotonic() - started > HEAD_TIMEOUT
        status, _ = Responses(slow_body).next()
        assert status == 403  # Django answered (no CSRF cookie): the body was read to its end

        watcher.join(timeout=HEAD_TIMEOUT + 15)
        received, closed_at = watched[0]
        assert received == b""  # closed without an answer, and without taking a thread
        assert HEAD_TIMEOUT - 0.5 <= closed_at - started <= HEAD_TIMEOUT + 3, closed_at - started
        assert get(server, "/admin/login/")[0] == 200
    finally:
        for sock in (stalled, trickled_head, slow_body):
            sock.close()


def test_a_stalled_body_does_not_hold_a_thread_for_ever(server):
    stalled = []
    try:
        started = time.monotonic()
        for _ in range(THREADS):
            sock = server.connect()
            sock.sendall(
                b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nusername="
            )
            stalled.append(sock)
        # The bodies are awaited in the event loop, not in a thread; past the
        # body timeout the connections are closed (an answer may come first).
        for sock in stalled:
            wait_closed(sock, started + BODY_TIMEOUT + 10)
        assert time.monotonic() - started <= BODY_TIMEOUT + 3
        status, seconds = get(server, "/admin/login/")
        assert status == 200
        assert seconds < 2
    finally:
        for sock in stalled:
            sock.close()


def test_keep_alive_serves_several_requests_on_one_connection(server):
    request = b"GET /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with server.connect() as sock:
        responses = Responses(sock)
        sock.sendall(request)
        first, first_body = responses.next()
        # The next head arrives in two pieces: it is read in the event loop too.
        sock.sendall(request[:20])
        time.sleep(0.3)
        sock.sendall(request[20:])
        second, second_body = responses.next()
        # Two pipelined requests at once: the second is already read when the first is answered.
        sock.sendall(request + request.replace(b"/admin/login/", b"/api/v1/projects/"))
        third, _ = responses.next()
        fourth, _ = responses.next()
    assert (first, second, third, fourth) == (200, 200, 200, 401)
    assert b"Leasehold" in first_body
    assert b"Leasehold" in second_body


def test_a_head_over_the_limits_is_answered_with_gunicorns_4xx(server):
    with server.connect() as sock:
        sock.sendall(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, body = Responses(sock).next()
    assert status == 400  # request line over --limit-request-line 8190
    # In the API's envelope, not gunicorn's HTML page.
    assert json.loads(body)["error"]["code"] == "VALIDATION_ERROR", body
    assert "Request Line is too large" in json.loads(body)["error"]["message"]

    # A head that never ends: past gunicorn's header buffer limit the parser
    # takes over and refuses it instead of anyone waiting for its end.
    with server.connect() as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 830_000)
        status, body = Responses(sock).next()
    assert status == 431, body
    assert json.loads(body)["error"]["code"] == "PAYLOAD_TOO_LARGE", body


# --- issue 27, M4: lying and trickling bodies ---------------------------------------------


def _post_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_lying_and_trickling_bodies_take_no_thread_and_end_by_the_body_timeout(server):
    """40 connections that never finish their bodies, half trickling a byte within every socket timeout."""
    liars, tricklers = [], []
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(SOCKET_TIMEOUT / 3):  # each byte well within the socket timeout
            for sock in tricklers:
                with contextlib.suppress(OSError):
                    sock.send(b" ")

    feeder = threading.Thread(target=trickle)
    try:
        started = time.monotonic()
        for n in range(5 * THREADS):
            liar = server.connect()
            liar.sendall(_post_head("/api/v1/projects/", 100) + b'{"slug":')  # says 100 bytes, sends 8
            liars.append(liar)
            trickler = server.connect()
            trickler.sendall(_post_head(f"/api/v1/tasks/X-{n + 1}/claim/", 1000) + b"{")
            tricklers.append(trickler)
        feeder.start()
        time.sleep(SOCKET_TIMEOUT + 1)  # long enough for every thread to be stuck, were they read in threads

        admin_status, admin_seconds = get(server, "/admin/login/")
        api_status, api_seconds = get(server, "/api/v1/projects/")
        assert (admin_status, api_status) == (200, 401)
        assert admin_seconds < 2, admin_seconds
        assert api_seconds < 2, api_seconds

        # Past the body timeout every one of them is closed, the tricklers too.
        for sock in liars + tricklers:
            wait_closed(sock, started + BODY_TIMEOUT + 10)
        assert time.monotonic() - started <= BODY_TIMEOUT + 4
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(10)
        for sock in liars + tricklers:
            sock.close()


def test_an_unread_trickling_body_is_not_drained_the_connection_is_closed(server):
    """A body the API never reads (too large: 413) and that trickles in: answered, then closed at once."""
    with server.connect() as sock:
        started = time.monotonic()
        sock.sendall(_post_head("/api/v1/projects/", 1_000_000) + b"{")  # over what is read in the event loop
        responses = Responses(sock)
        status, body = responses.next()
        assert status == 413, body
        # Keep trickling, each byte within the socket timeout: the server must not wait for the rest.
        closed = False
        while time.monotonic() - started < 3 * SOCKET_TIMEOUT and not closed:
            try:
                sock.send(b" ")
            except OSError:
                closed = True
                break
            sock.settimeout(SOCKET_TIMEOUT / 3)
            try:
                closed = sock.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
        assert closed
        assert time.monotonic() - started <= 1 + 3 + SOCKET_TIMEOUT / 3 * 2


def test_a_body_trickled_into_a_thread_ends_by_the_body_timeout(server):
    """A chunked body is read in the thread: one byte per read, each within the socket timeout, still ends."""
    stop = threading.Event()
    with server.connect() as sock:
        started = time.monotonic()
        sock.sendall(
            b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
        )

        def trickle() -> None:
            while not stop.wait(SOCKET_TIMEOUT / 3):
                try:
                    sock.send(b"1\r\na\r\n")
                except OSError:
                    return

        feeder = threading.Thread(target=trickle)
        feeder.start()
        try:
            wait_closed(sock, started + BODY_TIMEOUT + 10)
        finally:
            stop.set()
            feeder.join(10)
        assert time.monotonic() - started <= BODY_TIMEOUT + 3
    assert get(server, "/admin/login/")[0] == 200
