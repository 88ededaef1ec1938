"""`leasehold mcp` answers `initialize` before the MCP SDK is imported (SPEC §24: ≤ 400 ms of CPU).

Importing the official SDK costs about 400 ms of CPU by itself (`import mcp`
pulls in its client, pydantic models of every protocol type, anyio, …), and a
client waits for the `initialize` answer before anything else. So the first
message on stdin is read here, with nothing but the standard library:

- It is a valid `initialize` request: it is answered at once, exactly as the
  SDK answers it (the protocol version negotiated as the SDK does, the
  server's capabilities, name, version and instructions; a test compares the
  two answers byte for byte as JSON), and then the SDK starts.
- Anything else (`server/discover`, a batch, garbage, an `initialize` whose
  parameters the SDK would refuse): nothing is answered here.

Either way the SDK then sees the whole conversation from its first message,
through the streams `Relay` hands it (`stdio_server(stdin=…, stdout=…)`):
its stdin is the lines read here followed by the rest of the real stdin, read
by one thread that passes each chunk's lines to the event loop; its stdout
writes each message to the real stdout at once, except the SDK's own answer
to the `initialize` already answered (dropped; a differing one is reported on
stderr). While it runs, fd 0 reads the null device and fd 1 writes to stderr,
as the SDK's own stdio arranges, so nothing else in the process reaches the
wire.

Issue 34: these streams replace the SDK's (`anyio.wrap_file`: a worker thread
for every line read, every write and every flush) and the pipes this module
relayed them through before (two more threads, each line copied twice): the
MCP server's CPU per tool call goes down by what a thread hop costs, three
times a call.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio  # the SDK's event loop; imported there, not before the early answer

from agent import __version__

INSTRUCTIONS = (
    "Leasehold work ledger. claim or claim_next a task, read its context, leave checkpoints while you work, "
    "then finish. The lease is renewed for you while this server runs. If a tool answers LEASE_LOST, stop "
    "working on that task; on BUDGET_EXHAUSTED, stop and finish it (failed) or release it."
)
SERVER_NAME = "leasehold"
# The SDK's `mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS` (tests/agent/test_mcp_handshake.py checks they agree):
# a version the client asks for among these is echoed, any other gets the newest.
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CAPABILITIES = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}
_CHUNK = 65536


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else HANDSHAKE_PROTOCOL_VERSIONS[-1]
    return {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": version,
        "serverInfo": {"name": SERVER_NAME, "version": __version__},
    }


def _initialize_request(line: bytes) -> dict[str, Any] | None:
    """The message, when it is an `initialize` request the SDK would accept; else None."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "initialize":
        return None
    request_id, params = message.get("id"), message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int) or not isinstance(params, dict):
        return None
    client = params.get("clientInfo")
    if not isinstance(params.get("protocolVersion"), str) or not isinstance(params.get("capabilities"), dict):
        return None
    if params["protocolVersion"] not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # a version the SDK negotiates down: left to the SDK itself
    if not isinstance(client, dict) or not isinstance(client.get("name"), str):
        return None
    if not isinstance(client.get("version"), str):
        return None
    return message


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Relay:
    """The conversation after the early answer, as the SDK's stdin (`stdin`) and stdout (`stdout`) streams."""

    def __init__(self, replay: bytes, answered: dict[str, Any] | None) -> None:
        self.answered = answered  # the answer sent for `initialize`, or None
        self._dropped = answered is None
        self._replay = replay
        self._real_in = os.dup(0)
        self._real_out = os.dup(1)
        # Stray reads of fd 0 see its end, stray writes to fd 1 go to stderr: only the SDK's messages are sent.
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)
        os.dup2(2, 1)
        self._finished = False
        self.stdin = _Lines(self._feed)
        self.stdout = _Out(self._send)

    def _feed(self, deliver: Callable[[list[str] | None], None]) -> None:
        """The feeding thread: the replayed bytes, then the real stdin, as lines (each ends with its newline)."""
        pending = self._replay
        try:
            try:
                while True:
                    *lines, pending = pending.split(b"\n")
                    if lines:
                        deliver([line.decode("utf-8", errors="replace") + "\n" for line in lines])
                    chunk = os.read(self._real_in, _CHUNK)
                    if not chunk:
                        break
                    pending += chunk
            except OSError:
                pass
            if pending:
                deliver([pending.decode("utf-8", errors="replace")])
            deliver(None)  # the end of stdin
        except RuntimeError:
            pass  # the event loop is closed: the SDK is gone, and so is whoever read these lines

    def _send(self, text: str) -> None:
        if not self._dropped and self._is_the_answered(text):
            self._dropped = True
            return
        _write_all(self._real_out, text.encode("utf-8"))

    def _is_the_answered(self, line: str) -> bool:
        assert self.answered is not None
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("id") != self.answered["id"] or "method" in message:
            return False
        if message.get("result") != self.answered["result"]:
            sdk = line.rstrip("\n")
            print(f"leasehold mcp: the SDK's initialize answer differs from the early one: {sdk}", file=sys.stderr)
        return True

    def finish(self) -> None:
        """Give fds 0 and 1 back to the real stdin and stdout (once; later calls do nothing).

        Everything the SDK wrote has gone out already: its stdout writes at once."""
        if self._finished:
            return
        self._finished = True
        sys.stdout.flush()
        os.dup2(self._real_in, 0)
        os.dup2(self._real_out, 1)


class _Lines:
    """The SDK's stdin (`async for line in stdin`): lines a thread reads, handed to the event loop in batches."""

    def __init__(self, feed: Callable[[Callable[[list[str] | None], None]], None]) -> None:
        self._feed = feed
        self._ready: deque[str] = deque()
        self._ended = False
        self._arrived: asyncio.Event | None = None

    def __aiter__(self) -> _Lines:
        if self._arrived is None:  # the first iteration, in the SDK's event loop: the feeding thread starts
            import asyncio

            loop = asyncio.get_running_loop()
            self._arrived = asyncio.Event()

            def deliver(lines: list[str] | None) -> None:
                loop.call_soon_threadsafe(self._take, lines)

            threading.Thread(target=self._feed, args=(deliver,), name="leasehold-mcp-stdin", daemon=True).start()
        return self

    def _take(self, lines: list[str] | None) -> None:
        assert self._arrived is not None
        if lines is None:
            self._ended = True
        else:
            self._ready.extend(lines)
        self._arrived.set()

    async def __anext__(self) -> str:
        assert self._arrived is not None
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            self._arrived.clear()
            await self._arrived.wait()
        return self._ready.popleft()


class _Out:
    """The SDK's stdout (`await stdout.write(text)`, `await stdout.flush()`): each message written at once.

    A blocking write of one message to the real stdout, from the event loop: the client reads its end
    of the pipe, and stdin is read by its own thread meanwhile, so a client that writes before it reads
    is still served."""

    def __init__(self, send: Callable[[str], None]) -> None:
        self._send = send

    async def write(self, text: str) -> None:
        self._send(text)

    async def flush(self) -> None:
        return None


def answer_initialize_early() -> Relay:
    """Read the first message on stdin; answer it when it is `initialize`; relay the rest to the SDK."""
    read = b""
    while b"\n" not in read:
        chunk = os.read(0, _CHUNK)
        if not chunk:
            break
        read += chunk
    line = read.split(b"\n", 1)[0]
    request = _initialize_request(line) if b"\n" in read else None
    answered = None
    if request is not None:
        answered = {"jsonrpc": "2.0", "id": request["id"], "result": initialize_result(request["params"])}
        _write_all(1, json.dumps(answered, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    return Relay(read, answered)
