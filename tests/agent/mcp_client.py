"""Drive `leasehold mcp` with the official `mcp` SDK's client over stdio, as Claude Code or Codex would."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from tests.agent.live import REPO


def server_params(env: dict[str, str], *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent", "mcp", *args],
        env={"LEASEHOLD_CONFIG": env["LEASEHOLD_CONFIG"]},
        cwd=str(REPO),
    )


class Session:
    """One connected client: `call` answers (failed, text), `json` the parsed answer of a tool that succeeds."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> tuple[bool, str]:
        result = await self.client.call_tool(name, arguments or {})
        block = result.content[0]
        assert isinstance(block, TextContent)
        return bool(result.is_error), block.text

    async def json(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        failed, text = await self.call(name, arguments)
        assert not failed, f"{name}: {text}"
        return json.loads(text)


async def with_session(
    env: dict[str, str], work: Callable[[Session], Awaitable[Any]], *args: str, crash_ok: bool = False
) -> Any:
    """Run `work` in a session with a fresh `leasehold mcp`; the session then ends as a client ends it.

    `crash_ok`: the server is killed inside `work`, so ending the session may fail; its result still counts.
    """
    outcome: list[Any] = []
    try:
        async with Client(server_params(env, *args), read_timeout_seconds=30) as client:
            outcome.append(await work(Session(client)))
    except Exception:
        if not (crash_ok and outcome):
            raise
    return outcome[0]
