"""One client of `--only mcp`: the official MCP SDK's client driving its own `leasehold mcp` over stdio.

`python -m bench.mcp_client --config PATH --seconds S` is started by
`bench.mcp_path`, one process per client, as a coding agent runs its MCP
server: the SDK's stdio client spawns `python -m agent mcp` with only
`LEASEHOLD_CONFIG` set (the login of this client's agent). It needs no Django.

It speaks one JSON line at a time on stdout, and waits for lines on stdin:

1. connected, `tools/list` read and WARMUP_CYCLES cycles done, it prints
   `{"ready": ..., "tools_list_bytes": N, "requests": ...}` and waits for `go`;
2. it repeats claim_next → checkpoint → finish (done) for S seconds (a cycle
   started before the end is completed), prints the results line, and waits
   for `end` (the parent reads the CPU of the MCP server before it goes);
3. it ends the session as a client does (stdin closed, the server exits).

With `--trace FILE`, a first, separate session runs TRACED_CYCLES cycles with
`LEASEHOLD_TRACE=FILE` (the toolkit's per-request trace) and reports the HTTP
requests each tool call made; the measured session is never traced.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WARMUP_CYCLES = 3
TRACED_CYCLES = 2
MAX_ERRORS = 20
CHECKPOINT = "Checkpoint: migrated the search index; tests green locally. Next: wire the API and the admin filter."
NEXT_STEPS = ["wire the API", "admin filter"]


class CycleError(RuntimeError):
    pass


def server_params(config: str, *, trace: str | None = None) -> StdioServerParameters:
    env = {"LEASEHOLD_CONFIG": config, **({"LEASEHOLD_TRACE": trace} if trace else {})}
    return StdioServerParameters(command=sys.executable, args=["-m", "agent", "mcp"], env=env, cwd=str(PROJECT_ROOT))


def tools_list_bytes(listed: Any) -> int:
    """The tools/list answer's size as the client receives it (as tests/agent/test_mcp.py measures it)."""
    return len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())


async def _call(client: Client, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, TextContent) else repr(result.content)
    if result.is_error:
        raise CycleError(f"{name}: {text[:200]}")
    return text


async def cycle(client: Client) -> dict[str, float] | None:
    """One claim_next → checkpoint → finish: the seconds of each and of the cycle; None when nothing was claimable."""
    began = time.perf_counter()
    if json.loads(await _call(client, "claim_next", {})) == {}:
        return None
    claimed = time.perf_counter()
    await _call(client, "checkpoint", {"content": CHECKPOINT, "next_steps": NEXT_STEPS})
    noted = time.perf_counter()
    await _call(client, "finish", {"outcome": "done", "summary": "bench"})
    ended = time.perf_counter()
    return {
        "claim_next": claimed - began,
        "checkpoint": noted - claimed,
        "finish": ended - noted,
        "cycle": ended - began,
    }


def _say(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


async def _wait_for(word: str) -> None:
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    if line.strip() != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line.strip()!r}")


def _trace_lines(trace: Path) -> list[str]:
    if not trace.exists():
        return []
    return [f"{line['method']} {line['path']}" for line in map(json.loads, trace.read_text().splitlines())]


async def traced_requests(config: str, trace: Path) -> dict[str, list[str]]:
    """The HTTP requests of each tool call in the last of TRACED_CYCLES cycles (paths with their ids)."""
    made: dict[str, list[str]] = {}
    arguments = {"claim_next": {}, "checkpoint": {"content": CHECKPOINT, "next_steps": NEXT_STEPS}}
    async with Client(server_params(config, trace=str(trace)), read_timeout_seconds=60) as client:
        for _ in range(TRACED_CYCLES):
            for name in ("claim_next", "checkpoint", "finish"):
                before = len(_trace_lines(trace))
                await _call(client, name, arguments.get(name, {"outcome": "done", "summary": "bench"}))
                made[name] = _trace_lines(trace)[before:]
    return made


async def run(config: str, seconds: float, trace: Path | None = None) -> None:
    requests = None if trace is None else await traced_requests(config, trace)
    samples: dict[str, list[float]] = {"claim_next": [], "checkpoint": [], "finish": [], "cycle": []}
    errors: list[str] = []
    nothing_claimable = False
    async with Client(server_params(config), read_timeout_seconds=60) as client:
        size = tools_list_bytes(await client.list_tools())
        for _ in range(WARMUP_CYCLES):
            if await cycle(client) is None:
                raise SystemExit("nothing claimable during the warm-up")
        _say({"ready": True, "tools_list_bytes": size, "requests": requests})
        await _wait_for("go")
        began = time.perf_counter()
        deadline = began + seconds
        while time.perf_counter() < deadline and len(errors) < MAX_ERRORS:
            try:
                timed = await cycle(client)
            except CycleError as error:
                errors.append(str(error))
                continue
            if timed is None:
                nothing_claimable = True
                break
            for name, value in timed.items():
                samples[name].append(value)
        elapsed = time.perf_counter() - began
        _say({"seconds": elapsed, "samples": samples, "errors": errors, "nothing_claimable": nothing_claimable})
        await _wait_for("end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_client", description=__doc__)
    parser.add_argument("--config", required=True, help="the agent's LEASEHOLD_CONFIG file")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--trace", type=Path, default=None, help="first count each tool call's HTTP requests")
    args = parser.parse_args(argv)
    anyio.run(run, args.config, args.seconds, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
