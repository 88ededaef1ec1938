"""Parked requests: long-poll and Server-Sent-Events waiters that hold no thread while they wait (SPEC §18).

`ParkingMixin` is part of `config.gunicorn.HeadFirstWorker`. It offers every
request two callables in its WSGI environ; a view that has nothing to answer
yet calls one and returns a placeholder response:

- `environ[PARK_KEY](deadline=..., subscribe=...)` (long-poll): the worker
  writes nothing, gives the thread back, and keeps the connection in the
  event loop. `subscribe(wake)` registers `wake` with whatever knows when to
  look again (the process's event watcher) and returns the unsubscribe.
  When woken, or at `deadline` (monotonic seconds), the worker runs the same
  request through the application again, with `environ[DEADLINE_KEY]` set to
  that deadline (and `environ[CARRY_KEY]` set to what it passed as
  `park(carry=...)`, if anything), on a pool thread; the view reads again
  and answers, or parks again. It runs with the body it had (a POST that
  waits, like `claims/next` with `wait`: the worker keeps what was read).
- `environ[STREAM_KEY](stream)` (SSE): the worker writes the response's
  headers and first chunk, then parks the open response. When woken it calls
  `stream.poll()` on a pool thread and writes the bytes it returns; when
  `stream.heartbeat_seconds` pass with nothing written it writes a comment
  line. `poll()` returning None ends the stream.

Resumed requests run on a pool of their own (a quarter of the worker's
threads, at least one), not on the request threads: one event can wake every
waiter of a project at once, and hundreds of re-reads queued ahead of them
would hold back every claim and renewal behind a herd (bench `waiters`,
docs/performance.md). The herd then takes longer to drain, and plain
requests keep their threads.

A parked connection is watched for readability: a client that hangs up (or
sends anything) is dropped and its subscription cancelled. Wake-ups may come
from any thread; they are handed to the event loop's thread through a pipe,
which alone submits work to the pool (gunicorn's futures list is the loop's).
Servers without this worker (runserver, the test client) offer neither key,
and the views wait in their thread instead.

Waiters are bounded (issue 27, H2): before a view parks or waits it takes a
slot from `waiter_slots()`, the process's count of waiters per agent and per
client address, and answers `RATE_LIMITED` when there is none. The worker
owns the slot from `park()` on and gives it back on every way out: the
answer written, the client gone, an error, the stream's end. Under this
worker the limits are the server's, shared out between its processes (each
takes `ceil(limit / workers)`), and the waiters of one process may fill at
most half of its connection slots, so ordinary requests always find one.

A stream's writes never wait for its client (M5): a parked stream's socket
is non-blocking; what the kernel does not take at once stays with the lot,
which waits in the event loop for the socket to become writable (no thread,
no new messages meanwhile). A client that has not taken it within
`STREAM_WRITE_SECONDS` is dropped; it reconnects with `Last-Event-ID` and
loses nothing. So eight streams that never read cannot hold the resume pool.
"""

from __future__ import annotations

import contextlib
import io
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.http import wsgi

from core.parking_lot import PARKED, Intent, Lot, RecordedInput, Stream, framed, noop, send_some
from core.waiter_slots import waiter_capacity, waiter_slots

PARK_KEY = "leasehold.park"
STREAM_KEY = "leasehold.stream"
DEADLINE_KEY = "leasehold.wait_deadline"
# What a parking view handed to `park(carry=...)`, given back to the same request when it runs again.
CARRY_KEY = "leasehold.wait_carry"
HEARTBEAT = b": keepalive\n\n"
STREAM_WRITE_SECONDS = 10.0


def resume_threads(request_threads: int) -> int:
    """Threads that re-run woken waiters: a quarter of the request threads, at least one."""
    return max(1, request_threads // 4)


class ParkingMixin:
    """Mixed into a gthread worker (see config/gunicorn.py); uses its poller, lock, pool and futures."""

    poller: selectors.BaseSelector
    _lock: Any
    tpool: Any
    nr_conns: int
    alive: bool
    cfg: Any
    log: Any
    nr: int
    max_requests: int
    _keep: Any
    max_keepalived: int
    wsgi: Any

    def init_parking(self) -> None:
        self._lot: dict[Any, Lot] = {}
        self._ready: list[Lot] = []
        # The clock sleeps until the earliest deadline of a lot not yet woken (`_clock_due`; inf: none).
        self._clock = threading.Condition(self._lock)
        self._clock_due = float("inf")
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.poller.register(self._wake_read, selectors.EVENT_READ, self._on_wake_pipe)
        self._resume_pool = ThreadPoolExecutor(
            max_workers=resume_threads(self.cfg.threads), thread_name_prefix="leasehold-resume"
        )
        threading.Thread(target=self._tick, name="leasehold-parking-clock", daemon=True).start()
        waiter_slots().configure(processes=self.cfg.workers, capacity=waiter_capacity(self.cfg.worker_connections))

    # --- in a pool thread ---------------------------------------------------

    def handle_request(
        self,
        req: Any,
        conn: Any,
        deadline: float | None = None,
        held: Callable[[], None] = noop,
        carry: Any = None,
        body: bytes | None = None,
    ) -> Any:
        """gunicorn's gthread `handle_request`, plus the two parking offers (see the module docstring).

        `held` is the slot of a resumed long-poll: it passes to the lot if the
        request parks again, and is given back otherwise. `carry` is what the
        view handed to `park(carry=...)` before, back in `environ[CARRY_KEY]`;
        `body` the request's body as it was first read (a POST that waits).
        """
        environ: dict[str, Any] = {}
        resp = None
        intent = Intent(release=held)
        parked = False

        def park(
            *,
            deadline: float,
            subscribe: Callable[[Callable[[], None]], Callable[[], None]],
            release: Callable[[], None] | None = None,
            carry: Any = None,
        ) -> None:
            intent.deadline, intent.subscribe, intent.carry = deadline, subscribe, carry
            if release is not None:
                intent.release = release

        def stream(stream: Stream, *, release: Callable[[], None] = noop) -> None:
            intent.stream, intent.release = stream, release

        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, self.cfg)
            environ["wsgi.multithread"] = True
            recorded = RecordedInput(io.BytesIO(body) if body is not None else environ["wsgi.input"])
            environ["wsgi.input"] = recorded
            environ[PARK_KEY] = park
            environ[STREAM_KEY] = stream
            if deadline is not None:
                environ[DEADLINE_KEY] = deadline
            if carry is not None:
                environ[CARRY_KEY] = carry
            self.nr += 1
            if self.nr >= self.max_requests:
                if self.alive:
                    self.log.info("Autorestarting worker after current request.")
                    self.alive = False
                resp.force_close()
            if not self.alive or not self.cfg.keepalive or len(self._keep) >= self.max_keepalived:
                resp.force_close()
            respiter = self.wsgi(environ, resp.start_response)
            try:
                if intent.subscribe is not None and intent.deadline is not None and self.alive:
                    parked = True  # nothing is written: the request runs again when woken
                elif isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                    if intent.stream is not None and self.alive:
                        parked = True  # the response stays open
                    else:
                        resp.close()
            finally:
                request_time = datetime.now() - request_start
                if not parked:
                    self.log.access(resp, req, environ, request_time)
                if hasattr(respiter, "close"):
                    respiter.close()
            if parked:
                if intent.stream is not None:
                    lot = Lot(
                        conn,
                        req,
                        time.monotonic() + intent.stream.heartbeat_seconds,
                        intent.stream.subscribe,
                        stream=intent.stream,
                        resp=resp,
                        release=intent.release,
                    )
                    # From now on every write happens on a pool thread and must never wait (M5).
                    conn.sock.setblocking(False)
                else:
                    assert intent.subscribe is not None
                    assert intent.deadline is not None
                    lot = Lot(
                        conn,
                        req,
                        intent.deadline,
                        intent.subscribe,
                        release=intent.release,
                        carry=intent.carry,
                        body=recorded.whole(),
                    )
                self._park(lot)
                return PARKED
            if resp.should_close():
                self.log.debug("Closing connection.")
                return False
        except OSError:
            util.reraise(*sys.exc_info())
        except Exception:
            if resp and resp.headers_sent:
                self.log.exception("Error handling request")
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(2)
                    conn.sock.close()
                raise StopIteration() from None
            raise
        finally:
            if not parked:
                held()
                intent.release()
            with contextlib.suppress(Exception):
                self.cfg.post_request(self, req, environ, resp)
        return True

    def _park(self, lot: Lot) -> None:
        with self._lock:
            self._lot[lot.conn] = lot
            # Readable while parked: the client hung up (or broke protocol); either way it goes.
            self.poller.register(lot.conn.sock, selectors.EVENT_READ, partial(self._on_parked_readable, lot))
            self._set_clock(lot)
        lot.unsubscribe = lot.subscribe(partial(self._wake, lot))

    def _resume(self, lot: Lot) -> tuple[Any, Any]:
        conn = lot.conn
        if lot.stream is None:
            # The request runs again and owns the slot from here (see handle_request).
            try:
                resumed = self.handle_request(
                    lot.req, conn, deadline=lot.deadline, held=lot.release, carry=lot.carry, body=lot.body
                )
                return resumed, conn
            except Exception as exc:
                if not isinstance(exc, OSError | StopIteration):
                    self.log.exception("A parked request failed on resuming.")
                return False, conn
        try:
            if lot.pending:  # woken at its write deadline with bytes the client never took
                self.log.info("Dropping an event stream whose client stopped reading.")
                lot.release()
                return False, conn
            data = lot.stream.poll()
            if data is None:
                with contextlib.suppress(BlockingIOError):
                    lot.resp.close()  # the stream's end: the final chunk (best effort, never waiting)
                lot.release()
                return False, conn
            if not data and time.monotonic() >= lot.deadline:
                data = HEARTBEAT
            lot.woken = False
            if data:
                lot.deadline = time.monotonic() + lot.stream.heartbeat_seconds
                lot.pending = send_some(conn.sock, framed(lot.resp, data))
                if lot.pending:
                    lot.deadline = time.monotonic() + STREAM_WRITE_SECONDS
                    self._park_writing(lot)
                    return PARKED, conn
            self._park(lot)
            return PARKED, conn
        except Exception as exc:
            lot.release()
            if not isinstance(exc, OSError | StopIteration):
                self.log.exception("A parked request failed on resuming.")
            return False, conn

    def _park_writing(self, lot: Lot) -> None:
        """Park a stream with bytes still to send: woken by writability (or its write deadline), not by events."""
        lot.unsubscribe = noop
        with self._lock:
            self._lot[lot.conn] = lot
            self.poller.register(lot.conn.sock, selectors.EVENT_WRITE, partial(self._on_parked_writable, lot))
            self._set_clock(lot)

    def _set_clock(self, lot: Lot) -> None:
        """With the lock held: a lot just parked; the clock wakes earlier if its deadline comes first."""
        if lot.deadline < self._clock_due:
            self._clock_due = lot.deadline
            self._clock.notify()

    # --- any thread ---------------------------------------------------------

    def _wake(self, lot: Lot) -> None:
        with self._lock:
            if lot.woken or self._lot.get(lot.conn) is not lot:
                return
            lot.woken = True
            self._ready.append(lot)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_write, b"w")

    def _tick(self) -> None:
        """Wake each parked lot at its deadline. The clock sleeps until the earliest deadline, or until a lot
        parks with an earlier one (`_set_clock`): a worker whose lots wait a minute wakes once per deadline,
        not twenty times a second (issue 34: 1,000 idle runner slots), and not at all with nothing parked."""
        while True:
            with self._lock:
                now = time.monotonic()
                waiting = [lot for lot in self._lot.values() if not lot.woken]
                due = [lot for lot in waiting if lot.deadline <= now]
                self._clock_due = min((lot.deadline for lot in waiting if lot.deadline > now), default=float("inf"))
                if not due:
                    self._clock.wait(None if self._clock_due == float("inf") else self._clock_due - now)
                    continue
            for lot in due:
                self._wake(lot)

    # --- the event loop's thread --------------------------------------------

    def _on_wake_pipe(self, fileobj: Any) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass
        with self._lock:
            ready, self._ready = self._ready, []
            for lot in ready:
                self._unpark(lot)
        for lot in ready:
            lot.unsubscribe()
            self._submit_resume(lot)

    def _on_parked_readable(self, lot: Lot, sock: Any) -> None:
        self._drop_parked(lot)

    def _on_parked_writable(self, lot: Lot, sock: Any) -> None:
        """Send more of a stream's pending bytes, without waiting; once all are sent it parks as usual."""
        with self._lock:
            if self._lot.get(lot.conn) is not lot or lot.woken:
                return  # dropped, or woken at its deadline: the resume decides
        try:
            lot.pending = send_some(lot.conn.sock, lot.pending)
        except OSError:
            self._drop_parked(lot)
            return
        if lot.pending:
            return
        with self._lock:
            if lot.woken:
                return
            self._unpark(lot)
        assert lot.stream is not None  # only streams write from the lot
        lot.deadline = time.monotonic() + lot.stream.heartbeat_seconds
        self._park(lot)

    def _drop_parked(self, lot: Lot) -> None:
        """End a parked lot from the event loop: the client hung up, or its socket failed."""
        with self._lock:
            if self._lot.get(lot.conn) is not lot:
                return
            self._unpark(lot)
            if lot in self._ready:
                self._ready.remove(lot)
        lot.unsubscribe()
        lot.release()
        self.nr_conns -= 1
        lot.conn.close()

    def _unpark(self, lot: Lot) -> None:
        """With the lock held."""
        self._lot.pop(lot.conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(lot.conn.sock)

    def _submit_resume(self, lot: Lot) -> None:
        self._wrap_future(self._resume_pool.submit(self._resume, lot), lot.conn)  # type: ignore[attr-defined]

    def parked_count(self) -> int:
        with self._lock:
            return len(self._lot)
