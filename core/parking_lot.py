"""The records of a parked request and how its bytes reach the wire, for `core.parking.ParkingMixin`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


def noop() -> None:
    return None


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
class Intent:
    deadline: float | None = None
    subscribe: Callable[[Callable[[], None]], Callable[[], None]] | None = None
    stream: Stream | None = None
    release: Callable[[], None] = noop
    carry: Any = None


@dataclass(eq=False)
class Lot:
    conn: Any
    req: Any
    deadline: float
    subscribe: Callable[[Callable[[], None]], Callable[[], None]]
    stream: Stream | None = None
    resp: Any = None
    unsubscribe: Callable[[], None] = field(default=lambda: None)
    woken: bool = False
    # Gives the waiter's slot back (`WaiterSlots.admit`); called once the lot ends, however it ends.
    release: Callable[[], None] = noop
    # A stream's bytes the socket has not taken yet (framed as sent); the lot waits to write them.
    pending: bytes = b""
    # The view's own state for its next run (`park(carry=...)`, `CARRY_KEY`), and the request's body.
    carry: Any = None
    body: bytes = b""


class RecordedInput:
    """A request's `wsgi.input` that keeps what was read: a parked request runs again with the same body."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._read: list[bytes] = []

    def read(self, size: int | None = None) -> bytes:
        data = self._stream.read() if size is None or size < 0 else self._stream.read(size)
        self._read.append(data)
        return bytes(data)

    def readline(self, size: int | None = None) -> bytes:
        data = self._stream.readline() if size is None or size < 0 else self._stream.readline(size)
        self._read.append(data)
        return bytes(data)

    def readlines(self, hint: int | None = None) -> list[bytes]:
        lines = self._stream.readlines() if hint is None else self._stream.readlines(hint)
        self._read.extend(lines)
        return list(lines)

    def __iter__(self) -> Any:
        return iter(self.readline, b"")

    def whole(self) -> bytes:
        """Everything: what the view read and what it left (read now, so the connection is ready for the next)."""
        self.read()
        return b"".join(self._read)


def framed(resp: Any, data: bytes) -> bytes:
    """`data` as `resp.write` would put it on the wire (one chunk of a chunked response)."""
    resp.sent += len(data)
    return b"%X\r\n%s\r\n" % (len(data), data) if resp.chunked else data


def send_some(sock: Any, data: bytes) -> bytes:
    """Send what the (non-blocking) socket takes now; returns the rest. OSError: the client is gone."""
    try:
        sent = sock.send(data)
    except (BlockingIOError, InterruptedError):
        return data
    return data[sent:]
