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

Either way the SDK then sees the whole conversation from its first message:
stdin becomes a pipe fed with what was read and then the rest of the real
stdin; stdout a pipe whose lines go on to the real stdout, except the SDK's
own answer to the `initialize` already answered (dropped; a differing one is
reported on stderr). `Relay.finish()` closes the SDK's stdout and waits until
every line it wrote is passed on.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
from typing import Any

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
    """The SDK's stdin and stdout, relayed (see the module docstring)."""

    def __init__(self, replay: bytes, answered: dict[str, Any] | None) -> None:
        self.answered = answered  # the answer sent for `initialize`, or None
        self._finished = False
        self._stopping = threading.Event()
        self._real_in = os.dup(0)
        self._real_out = os.dup(1)
        in_read, self._in_write = os.pipe()
        self._out_read, out_write = os.pipe()
        os.dup2(in_read, 0)
        os.close(in_read)
        os.dup2(out_write, 1)
        os.close(out_write)
        self._feeder = threading.Thread(target=self._feed, args=(replay,), name="leasehold-mcp-stdin", daemon=True)
        self._passer = threading.Thread(target=self._pass_on, name="leasehold-mcp-stdout", daemon=True)
        self._feeder.start()
        self._passer.start()

    def _feed(self, replay: bytes) -> None:
        try:
            _write_all(self._in_write, replay)
            while chunk := os.read(self._real_in, _CHUNK):
                _write_all(self._in_write, chunk)
        except OSError:
            pass
        finally:
            os.close(self._in_write)  # the SDK sees the end of stdin

    def _pass_on(self) -> None:
        pending = b""
        dropped = self.answered is None
        while True:
            # Until the pipe ends, or `finish` says the SDK is done and nothing is left to read (the SDK may
            # keep a duplicate of its stdout open, so the end of the pipe cannot be waited for).
            if not select.select([self._out_read], [], [], 0.05)[0]:
                if self._stopping.is_set():
                    break
                continue
            chunk = os.read(self._out_read, _CHUNK)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not dropped and self._is_the_answered(line):
                    dropped = True
                    continue
                _write_all(self._real_out, line + b"\n")
        if pending:
            _write_all(self._real_out, pending)

    def _is_the_answered(self, line: bytes) -> bool:
        assert self.answered is not None
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("id") != self.answered["id"] or "method" in message:
            return False
        if message.get("result") != self.answered["result"]:
            sdk = line.decode(errors="replace")
            print(f"leasehold mcp: the SDK's initialize answer differs from the early one: {sdk}", file=sys.stderr)
        return True

    def finish(self, timeout: float = 10.0) -> None:
        """Close the SDK's stdout and wait until everything it wrote has gone out (once; later calls do nothing)."""
        if self._finished:
            return
        self._finished = True
        sys.stdout.flush()
        self._stopping.set()  # every line the SDK wrote is in the pipe by now: the passer empties it and ends
        self._passer.join(timeout)


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
