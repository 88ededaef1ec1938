"""gunicorn's threaded worker, made to survive slow clients without a buffering proxy.

The rule it keeps: no thread waits for a client that has not finished sending
its request head. gunicorn's gthread worker hands a connection to a thread as
soon as the socket is readable, and the thread then blocks in `recv` on a
half-sent head; a handful of such clients (one per thread) freezes the API and
the admin. `HeadFirstWorker` reads the head in the event loop instead, into a
buffer per connection, and submits the connection to the thread pool only once
the head is complete (or too long, so that gunicorn's parser answers its 4xx).
A head not complete within `LEASEHOLD_HEAD_TIMEOUT_SECONDS` (10) of the
connection being accepted, or of a kept-alive connection waking up, is closed
without ever taking a thread.

The body is read the same way: a body announced by `Content-Length` and no
larger than `BODY_IN_LOOP_BYTES` (the API's own limit) is read in the event
loop too, and must be complete within `LEASEHOLD_BODY_TIMEOUT_SECONDS` (20)
of its head, or the connection is closed, again without taking a thread: a
client that lies about its length or trickles a byte at a time holds a
connection slot for that long, never a thread. Larger and chunked bodies,
and a client waiting for `100 Continue`, are read in the thread, where all
the reads of one request end by the same body deadline (`DeadlineUnreader`)
besides each read's `LEASEHOLD_SOCKET_TIMEOUT_SECONDS` (30), which also
bounds a client that stops reading the response. A body the application did
not read is drained for at most `DRAIN_SECONDS` after the answer, then the
connection is closed instead of kept alive.

`manage.py serve` runs it (`--worker-class config.gunicorn.HeadFirstWorker`)
and sets the variables from its `--head-timeout` / `--body-timeout` /
`--socket-timeout`. With
TLS in gunicorn itself (`cfg.is_ssl`) the head cannot be read before the
handshake, so the worker behaves exactly as gthread; terminate TLS in a proxy
instead (docs/operations.md, "Deploying").
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import re
import selectors
import time
from functools import partial
from typing import Any

from gunicorn import util as gunicorn_util
from gunicorn.http.message import DEFAULT_MAX_HEADERFIELD_SIZE, MAX_HEADERS, MAX_REQUEST_LINE
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker

from core.errors import LedgerError, PayloadTooLarge, PermissionDenied, ValidationFailed
from core.parking import PARKED, ParkingMixin

HEAD_END = b"\r\n\r\n"
# Large enough that a few reads take a whole head, small enough that a
# thousand connections mid-head do not add up to much more than their heads.
RECV_SIZE = 65536
# Bodies up to this size are read in the event loop before the request takes a thread: the API
# refuses larger ones (api.inputs.MAX_BODY_BYTES), and memory per connection stays bounded.
BODY_IN_LOOP_BYTES = 256 * 1024
# After the answer, an unread rest of the body is read for at most this long; then the connection
# is closed instead of kept alive (a trickling client would otherwise hold the thread).
DRAIN_SECONDS = 1.0
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]+)[ \t]*\r\n", re.IGNORECASE)
_READ_IN_THREAD = re.compile(rb"\r\n(?:transfer-encoding|expect):", re.IGNORECASE)


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise ValueError(f"{name} must be a number of seconds between 0 and 3600; got {raw!r}.")
    return value


def head_limit(cfg: Any) -> int:
    """Bytes after which gunicorn's parser refuses a head that has no end yet.

    The same arithmetic as `gunicorn.http.message.Request`: a request line
    within its limit, its CRLF, and then more header bytes than the parser
    buffers. With this many bytes held and one more byte arriving, the parser
    raises LimitRequestLine or LimitRequestHeaders without waiting for more.
    """
    line = cfg.limit_request_line
    if line < 0 or line >= MAX_REQUEST_LINE:
        line = MAX_REQUEST_LINE
    fields = cfg.limit_request_fields
    if fields <= 0 or fields > MAX_HEADERS:
        fields = MAX_HEADERS
    field_size = cfg.limit_request_field_size
    if field_size <= 0:
        field_size = DEFAULT_MAX_HEADERFIELD_SIZE
    # limit_request_line=0 means "unlimited" to gunicorn; past this many bytes
    # the thread then waits for the line's end, bounded by the socket timeout.
    return (line or MAX_REQUEST_LINE) + 2 + fields * (field_size + 2) + 4


def _body_end(head: bytes | bytearray, end: int) -> int | None:
    """Where the request whose head ends at `end` ends, when its body is to be read in the event loop.

    None: hand the connection to a thread now. No body; a chunked body; an
    `Expect: 100-continue` (the client waits for gunicorn's answer before
    sending); a length over `BODY_IN_LOOP_BYTES`; or a length gunicorn's
    parser should refuse (several, or not a number).
    """
    fields = bytes(head[: end + len(HEAD_END)])
    if _READ_IN_THREAD.search(fields):
        return None
    lengths = _CONTENT_LENGTH.findall(fields)
    if len(lengths) != 1 or len(lengths[0]) > 12:
        return None
    length = int(lengths[0])
    if not 0 < length <= BODY_IN_LOOP_BYTES:
        return None
    return end + len(HEAD_END) + length


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, with one deadline for all the reads of a request besides each read's timeout.

    Each read waits at most the socket timeout, so a client sending one byte
    per read would otherwise hold the thread for ever. Past the deadline a
    read raises `TimeoutError`: the application sees an unreadable body,
    and the connection is closed.
    """

    def __init__(self, sock: Any, socket_timeout: float) -> None:
        super().__init__(sock)
        self.socket_timeout = socket_timeout
        self.deadline = math.inf

    def chunk(self) -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within its deadline")
        self.sock.settimeout(min(self.socket_timeout, left))
        try:
            return bytes(self.sock.recv(self.mxchunk))
        finally:
            self.sock.settimeout(self.socket_timeout)  # writing the answer keeps the plain timeout


# A head gunicorn refuses before Django sees it (a request line over --limit-request-line, too
# many or too long header fields, a bad method or version) is answered in the API's envelope,
# with gunicorn's status, instead of gunicorn's HTML page (SPEC §8: one error shape).
_ERROR_BY_STATUS: dict[int, type[LedgerError]] = {
    400: ValidationFailed,
    403: PermissionDenied,
    431: PayloadTooLarge,
    501: ValidationFailed,
}


def write_json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """`gunicorn.util.write_error`, writing `{"error": {...}}` as JSON."""
    message = f"{reason}: {mesg[:200]}" if mesg else reason
    error = _ERROR_BY_STATUS.get(status_int, LedgerError)(message)
    body = json.dumps({"error": error.as_dict()}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gunicorn_util.write_nonblock(sock, head.encode("latin-1") + body)


# gunicorn's worker calls `util.write_error` from its `handle_error`; this module is loaded only
# in the server's processes (as the worker class), so the replacement reaches no one else.
gunicorn_util.write_error = write_json_error


class HeadFirstWorker(ParkingMixin, ThreadWorker):
    """gthread, except that a connection takes a thread only once its request head is here.

    Long-poll and stream waiters are parked in the event loop, holding no
    thread while they wait (`core.parking`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout = _seconds_from_env("LEASEHOLD_HEAD_TIMEOUT_SECONDS", 10.0)
        self.socket_timeout = _seconds_from_env("LEASEHOLD_SOCKET_TIMEOUT_SECONDS", 30.0)
        self.body_timeout = _seconds_from_env("LEASEHOLD_BODY_TIMEOUT_SECONDS", 20.0)
        self.head_limit = head_limit(self.cfg)
        # Connections whose head (or small body) is being read, and when each must be complete.
        # Only the event loop's thread touches it.
        self._heads: dict[TConn, float] = {}
        # Of those whose head is complete: where their body ends in `conn.head`.
        self._body_ends: dict[TConn, int] = {}

    def run(self) -> None:
        self.init_parking()  # the poller exists now (init_process made it) and the loop has not started
        super().run()

    def finish_request(self, fs: Any) -> None:
        if not fs.cancelled() and fs.exception() is None and fs.result()[0] is PARKED:
            return  # the connection is in the parking lot, neither kept alive nor closed
        super().finish_request(fs)

    def accept(self, server: Any, listener: Any) -> None:
        if self.cfg.is_ssl:
            super().accept(server, listener)
            return
        try:
            sock, client = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = TConn(self.cfg, sock, client, server)
        conn.head = bytearray()
        self.nr_conns += 1
        # The clock starts at accept: a client that connects and sends nothing
        # holds a connection slot for the head timeout, not for ever.
        self._heads[conn] = time.monotonic() + self.head_timeout
        self._wait_for_bytes(conn)

    def _wait_for_bytes(self, conn: TConn) -> None:
        with self._lock:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        if self.cfg.is_ssl:
            super().on_client_socket_readable(conn, client)
            return
        with self._lock:
            self.poller.unregister(client)
            if conn not in self._heads:
                # A kept-alive connection woke up: its next head starts now.
                try:
                    self._keep.remove(conn)
                except ValueError:
                    return  # its keep-alive ran out meanwhile and it was closed (as in gthread)
                self._heads[conn] = time.monotonic() + self.head_timeout
        body_end = self._body_ends.get(conn)
        if body_end is None and len(conn.head) >= self.head_limit:
            # Over the limit and more is waiting: the parser reads it and
            # answers the error at once.
            self.enqueue_req(conn)
            return
        wanted = self.head_limit if body_end is None else body_end
        try:
            data = conn.sock.recv(min(RECV_SIZE, wanted - len(conn.head)))
        except (BlockingIOError, InterruptedError):
            self._wait_for_bytes(conn)
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            if conn.head:
                self.enqueue_req(conn)  # let the parser answer what it makes of a cut-off head
            else:
                self._drop(conn)
            return
        searched = max(0, len(conn.head) - len(HEAD_END) + 1)
        conn.head += data
        if body_end is None:
            head_end = conn.head.find(HEAD_END, searched)
            if head_end < 0:
                self._wait_for_bytes(conn)
                return
            body_end = _body_end(conn.head, head_end)
            if body_end is None:
                self.enqueue_req(conn)
                return
            # The head is here; its body gets the body timeout, still without a thread.
            self._body_ends[conn] = body_end
            self._heads[conn] = time.monotonic() + self.body_timeout
        if len(conn.head) >= body_end:
            self.enqueue_req(conn)
        else:
            self._wait_for_bytes(conn)

    def enqueue_req(self, conn: TConn) -> None:
        if self.cfg.is_ssl:
            super().enqueue_req(conn)
            return
        del self._heads[conn]
        self._body_ends.pop(conn, None)
        conn.init()
        # The thread reads the body and writes the answer blocking, but no
        # call waits on a stalled client past the socket timeout, and no
        # request's reads past its body deadline.
        conn.sock.settimeout(self.socket_timeout)
        if not isinstance(conn.parser.unreader, DeadlineUnreader):
            conn.parser.unreader = DeadlineUnreader(conn.sock, self.socket_timeout)
        conn.parser.unreader.deadline = time.monotonic() + self.body_timeout
        # The parser takes the head from its buffer as if off the socket.
        conn.parser.unreader.unread(bytes(conn.head))
        conn.head = bytearray()
        self._wrap_future(self.tpool.submit(self.handle, conn), conn)

    def handle(self, conn: TConn) -> tuple[bool, TConn]:
        keepalive, conn = super().handle(conn)
        while keepalive and keepalive is not PARKED and not self.cfg.is_ssl:
            # Back in the event loop the next bytes must be the next head:
            # read what is left of this body here, for a moment at most, and
            # close the connection rather than wait for a trickle.
            unreader = conn.parser.unreader
            unreader.deadline = min(unreader.deadline, time.monotonic() + DRAIN_SECONDS)
            try:
                while conn.parser.mesg.body.read(8192):
                    pass
            except Exception:
                self.log.debug("Closing a kept-alive connection whose body did not arrive.")
                return False, conn
            buffered = unreader.buf.getvalue()
            if HEAD_END not in buffered:
                unreader.buf = io.BytesIO()
                conn.head = bytearray(buffered)
                break
            # A pipelined request is already read: the poller would never wake
            # for it, so serve it in this thread, under a deadline of its own.
            unreader.deadline = time.monotonic() + self.body_timeout
            keepalive, conn = super().handle(conn)
        return keepalive, conn

    def murder_keepalived(self) -> None:
        super().murder_keepalived()
        now = time.monotonic()
        for conn in [conn for conn, deadline in self._heads.items() if deadline <= now]:
            # KeyError and the like: the socket is already gone from the poller.
            with self._lock, contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(conn.sock)
            self.log.debug("Closing a connection whose request head or body did not arrive in time.")
            self._drop(conn)

    def _drop(self, conn: TConn) -> None:
        self._heads.pop(conn, None)
        self._body_ends.pop(conn, None)
        self.nr_conns -= 1
        conn.close()
