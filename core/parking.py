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
  that deadline, on a pool thread; the view reads again and answers, or parks
  again.
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
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from gunicorn import util
from gunicorn.http import wsgi

PARK_KEY = "leasehold.park"
STREAM_KEY = "leasehold.stream"
DEADLINE_KEY = "leasehold.wait_deadline"
TICK_SECONDS = 0.05
HEARTBEAT = b": keepalive\n\n"


def resume_threads(request_threads: int) -> int:
    """Threads that re-run woken waiters: a quarter of the request threads, at least one."""
    return max(1, request_threads // 4)


class Stream(Protocol):
    heartbeat_seconds: float

    def poll(self) -> bytes | None: ...

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]: ...


class _Parked:
    """The `PARKED` marker a handle returns instead of keep-alive: the connection now lives in the parking lot."""

    def __bool__(self) -> bool:
        return True


PARKED: Any = _Parked()


@dataclass
class _Intent:
    deadline: float | None = None
    subscribe: Callable[[Callable[[], None]], Callable[[], None]] | None = None
    stream: Stream | None = None


@dataclass(eq=False)
class _Lot:
    conn: Any
    req: Any
    deadline: float
    subscribe: Callable[[Callable[[], None]], Callable[[], None]]
    stream: Stream | None = None
    resp: Any = None
    unsubscribe: Callable[[], None] = field(default=lambda: None)
    woken: bool = False


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
        self._lot: dict[Any, _Lot] = {}
        self._ready: list[_Lot] = []
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.poller.register(self._wake_read, selectors.EVENT_READ, self._on_wake_pipe)
        self._resume_pool = ThreadPoolExecutor(
            max_workers=resume_threads(self.cfg.threads), thread_name_prefix="leasehold-resume"
        )
        threading.Thread(target=self._tick, name="leasehold-parking-clock", daemon=True).start()

    # --- in a pool thread ---------------------------------------------------

    def handle_request(self, req: Any, conn: Any, deadline: float | None = None) -> Any:
        """gunicorn's gthread `handle_request`, plus the two parking offers (see the module docstring)."""
        environ: dict[str, Any] = {}
        resp = None
        intent = _Intent()

        def park(*, deadline: float, subscribe: Callable[[Callable[[], None]], Callable[[], None]]) -> None:
            intent.deadline, intent.subscribe = deadline, subscribe

        def stream(stream: Stream) -> None:
            intent.stream = stream

        try:
            self.cfg.pre_request(self, req)
            request_start = datetime.now()
            resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, self.cfg)
            environ["wsgi.multithread"] = True
            environ[PARK_KEY] = park
            environ[STREAM_KEY] = stream
            if deadline is not None:
                environ[DEADLINE_KEY] = deadline
            self.nr += 1
            if self.nr >= self.max_requests:
                if self.alive:
                    self.log.info("Autorestarting worker after current request.")
                    self.alive = False
                resp.force_close()
            if not self.alive or not self.cfg.keepalive or len(self._keep) >= self.max_keepalived:
                resp.force_close()
            respiter = self.wsgi(environ, resp.start_response)
            parked = False
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
                    lot = _Lot(
                        conn,
                        req,
                        time.monotonic() + intent.stream.heartbeat_seconds,
                        intent.stream.subscribe,
                        stream=intent.stream,
                        resp=resp,
                    )
                else:
                    assert intent.subscribe is not None
                    assert intent.deadline is not None
                    lot = _Lot(conn, req, intent.deadline, intent.subscribe)
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
            with contextlib.suppress(Exception):
                self.cfg.post_request(self, req, environ, resp)
        return True

    def _park(self, lot: _Lot) -> None:
        with self._lock:
            self._lot[lot.conn] = lot
            # Readable while parked: the client hung up (or broke protocol); either way it goes.
            self.poller.register(lot.conn.sock, selectors.EVENT_READ, partial(self._on_parked_readable, lot))
        lot.unsubscribe = lot.subscribe(partial(self._wake, lot))

    def _resume(self, lot: _Lot) -> tuple[Any, Any]:
        conn = lot.conn
        try:
            if lot.stream is None:
                return self.handle_request(lot.req, conn, deadline=lot.deadline), conn
            data = lot.stream.poll()
            if data is None:
                lot.resp.close()  # the stream's end: the final chunk
                return False, conn
            if not data and time.monotonic() >= lot.deadline:
                data = HEARTBEAT
            if data:
                lot.resp.write(data)
                lot.deadline = time.monotonic() + lot.stream.heartbeat_seconds
            lot.woken = False
            self._park(lot)
            return PARKED, conn
        except Exception as exc:
            if not isinstance(exc, OSError | StopIteration):
                self.log.exception("A parked request failed on resuming.")
            return False, conn

    # --- any thread ---------------------------------------------------------

    def _wake(self, lot: _Lot) -> None:
        with self._lock:
            if lot.woken or self._lot.get(lot.conn) is not lot:
                return
            lot.woken = True
            self._ready.append(lot)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_write, b"w")

    def _tick(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)
            now = time.monotonic()
            with self._lock:
                due = [lot for lot in self._lot.values() if not lot.woken and lot.deadline <= now]
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

    def _on_parked_readable(self, lot: _Lot, sock: Any) -> None:
        with self._lock:
            if self._lot.get(lot.conn) is not lot:
                return
            self._unpark(lot)
            if lot in self._ready:
                self._ready.remove(lot)
        lot.unsubscribe()
        self.nr_conns -= 1
        lot.conn.close()

    def _unpark(self, lot: _Lot) -> None:
        """With the lock held."""
        self._lot.pop(lot.conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(lot.conn.sock)

    def _submit_resume(self, lot: _Lot) -> None:
        self._wrap_future(self._resume_pool.submit(self._resume, lot), lot.conn)  # type: ignore[attr-defined]

    def parked_count(self) -> int:
        with self._lock:
            return len(self._lot)
