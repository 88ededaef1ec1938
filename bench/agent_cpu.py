"""`--only agent` (issue 29, SPEC §24): the agent side's own CPU — per `leasehold` CLI call, and `leasehold mcp`
until it answers `initialize`.

A production server (`manage.py serve --no-cluster`) runs against the bench
database; one agent is logged in with a config directory of its own. Each
CLI command (`note`, `renew`, `ready`, `context`, `hook session-start`) runs
CALLS times as a fresh process, as an agent runs it, and its CPU (user +
system, from the reaped child's rusage) is the figure: budget 150 ms per call.
`leasehold mcp` is started CALLS times; the CPU its process has spent (from
`/proc/<pid>/stat`) when the `initialize` answer arrives is the figure:
budget 400 ms. These are measurements to read, not timed tests.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cycles import fresh_fleet, release_pool
from bench.environment import Target
from bench.harness import percentile
from bench.http import create_agents, serving
from bench.processes import PROJECT_ROOT
from bench.results import Row
from bench.sizes import Sizes

CALLS = 10
SMOKE_CALLS = 3
CLI_BUDGET_MS = 150
MCP_BUDGET_MS = 400
TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")
COMMANDS: dict[str, tuple[str, ...]] = {
    "note": ("note", "bench note"),
    "renew": ("renew",),
    "ready": ("ready",),
    "context": ("context",),
    "hook session-start": ("hook", "session-start"),
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def _env(config: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("LEASEHOLD_", "DATABASE_URL"))}
    env["LEASEHOLD_CONFIG"] = str(config)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


def _child_cpu_ms(argv: list[str], env: dict[str, str]) -> float:
    """CPU (user + system) of one child process, reaped, in milliseconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:])} exited {done.returncode}: {done.stderr[-500:]}")
    return 1000 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def _proc_cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return 1000 * (int(fields[11]) + int(fields[12])) * TICK_SECONDS  # utime, stime


def _mcp_initialize_cpu_ms(env: dict[str, str]) -> float:
    """CPU `leasehold mcp` spent when its `initialize` answer arrives."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "mcp", "--no-keep-alive", "--keep-on-exit"],
        env=env,
        cwd=PROJECT_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while not select.select([process.stdout], [], [], 1.0)[0]:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("leasehold mcp did not answer initialize")
        answer = json.loads(process.stdout.readline())
        spent = _proc_cpu_ms(process.pid)
        if answer.get("id") != 1 or "result" not in answer:
            raise RuntimeError(f"leasehold mcp answered initialize with {answer}")
        return spent
    finally:
        process.kill()
        process.wait()


def _row(target: Target, workload: str, samples: list[float], budget: int, **extra: Any) -> Row:
    return Row(
        database=target.vendor,
        workload=workload,
        mode="agent",
        concurrency=1,
        ops=len(samples),
        seconds=sum(samples) / 1000,
        throughput=None,
        p50_ms=percentile(samples, 0.50),
        p99_ms=percentile(samples, 0.99),
        extra={"budget_cpu_ms": budget, "max_cpu_ms": round(max(samples), 1), **extra},
    )


def agent(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    calls = SMOKE_CALLS if sizes.w1_tasks < 10_000 else CALLS
    fleet = fresh_fleet("agentcpu", agents=0, tasks=20)
    [(_, token)] = create_agents(fleet.project, 1, prefix=f"{fleet.project.slug}-a")
    release_pool()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-agent-") as home, serving(target, workers=1) as server:
        config = Path(home) / "config" / "config.json"
        config.parent.mkdir(mode=0o700)
        url = f"http://{server.host}:{server.port}"
        config.write_text(json.dumps({"url": url, "token": token, "project": fleet.project.slug}))
        config.chmod(0o600)
        env = _env(config)
        leasehold = [sys.executable, "-m", "agent"]
        _child_cpu_ms([*leasehold, "claim", "--next"], env)
        for name, command in COMMANDS.items():
            samples = [_child_cpu_ms([*leasehold, *command], env) for _ in range(calls)]
            rows.append(_row(target, f"agent: cli {name} cpu", samples, CLI_BUDGET_MS))
        _child_cpu_ms([*leasehold, "release"], env)
        baseline = [_child_cpu_ms([sys.executable, "-c", "pass"], env) for _ in range(calls)]
        rows[0].extra["python_startup_cpu_ms"] = round(percentile(baseline, 0.50) or 0.0, 1)
        samples = [_mcp_initialize_cpu_ms(env) for _ in range(calls)]
        rows.append(_row(target, "agent: mcp initialize cpu", samples, MCP_BUDGET_MS))
    return rows, {}
