"""`leasehold mcp`: the agent operations as MCP tools over stdio (SPEC §13, §15.3), on the official `mcp` SDK.

Lease tokens never leave this machine: `claim`/`claim_next` keep the lease
here, in the agent's state files (`agent.mcp.holdings`), and unless started
with `--no-keep-alive` renew it in the background for as long as the server
runs, so the model needs no timer. The run heartbeat is sent while it runs.

- Start: the attempts an earlier `leasehold mcp` of this agent held are
  taken back (a client restarting its server keeps its tasks).
- The client session ends cleanly (stdin closes, or SIGTERM/SIGINT as the
  MCP stdio shutdown sends): every attempt still held is handed off
  (`client_shutdown`), unless `--keep-on-exit` keeps them for the next
  server. A crash keeps them too, until their leases lapse.

The tools are `agent.mcp.tools`; the client configurations `agent.cli.connect`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from agent.client.errors import LeaseholdError
from agent.client.heartbeat import Heartbeat
from agent.mcp.handshake import Relay
from agent.mcp.holdings import Holdings
from agent.mcp.tools import INSTRUCTIONS, build_server
from agent.workspace.config import load_settings
from agent.workspace.session import make_client

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

HEARTBEAT_SECONDS = 60.0
# `leasehold mcp`'s exit status after a clean end: the CLI's EXIT_OK (`agent.cli.output`), which launches it.
EXIT_OK = 0

__all__ = ["INSTRUCTIONS", "Holdings", "build_server", "serve"]


def _shutdown_requested(signum: int, frame: FrameType | None) -> None:
    # The MCP stdio shutdown: the client closes stdin, then sends SIGTERM. Either is a clean end.
    raise KeyboardInterrupt


def _run_on(server: MCPServer, relay: Relay) -> None:
    """`server.run("stdio")`, with the relay's streams as stdin and stdout (`agent.mcp.handshake`).

    `MCPServer.run_stdio_async` takes no streams; this is its body with them (mcp is pinned in
    pyproject.toml; tests/agent/test_mcp.py and test_mcp_handshake.py drive it with the SDK's client)."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server

    async def run() -> None:
        async with stdio_server(stdin=relay.stdin, stdout=relay.stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    anyio.run(run)


def _say(text: str) -> None:
    print(f"leasehold mcp: {text}", file=sys.stderr, flush=True)


def serve(
    *, project: str | None = None, keep_alive: bool = True, keep_on_exit: bool = False, relay: Relay | None = None
) -> int:
    """Run the MCP server on stdio until the client closes it; then hand off (or keep) what it holds.

    `relay`: `initialize` was answered before the SDK was imported (`agent.mcp.handshake`); the SDK is served
    the rest of the conversation through its streams."""
    settings = load_settings()
    client = make_client(settings)
    holdings = Holdings(client, settings, project=project or settings.project, keep_alive=keep_alive)

    def take_back() -> None:
        # Beside the handshake, not before it: a slow server must not make the client give up on us.
        # A tool call waits for it (the holdings' lock), and tries again if it failed.
        try:
            taken = holdings.take_back()
        except LeaseholdError as error:
            _say(f"could not take back held attempts yet ({error}); will try again on the first tool call")
            return
        if taken:
            _say("took back " + ", ".join(held.describe() for held in taken))

    threading.Thread(target=take_back, name="leasehold-take-back", daemon=True).start()
    server = build_server(holdings)
    heartbeat = Heartbeat(client, every_seconds=HEARTBEAT_SECONDS).start()
    previous = signal.signal(signal.SIGTERM, _shutdown_requested)
    clean = signalled = False
    try:
        if relay is None:
            server.run("stdio")
        else:
            _run_on(server, relay)
        clean = True
    except KeyboardInterrupt:
        clean = signalled = True
    finally:
        # The client's SIGTERM follows the closing of stdin within seconds: it must not cut the hand-off short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        heartbeat.stop()
        if clean and not keep_on_exit:
            handed = holdings.hand_off_all()
            if handed:
                _say(f"handed off attempt(s) {', '.join(map(str, handed))} (client_shutdown)")
        holdings.stop()
        client.close()
        signal.signal(signal.SIGTERM, previous)
    if signalled:
        # stdin is still open and a thread blocks reading it: the interpreter could wait for it forever.
        sys.stdout.flush()
        if relay is not None:
            relay.finish()
        sys.stderr.flush()
        os._exit(EXIT_OK)
    return EXIT_OK
