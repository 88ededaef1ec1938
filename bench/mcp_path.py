"""`--only mcp` (issue 20, SPEC §20): the cycle through `leasehold mcp`, with the whole machine's CPU per cycle.

A production server (`manage.py serve --no-cluster`, the serve command's
default of MCP_WORKERS workers) runs against the bench database. Each client
is its own process (`bench.mcp_client`): the official MCP SDK's client over
stdio, driving its own `leasehold mcp` server process, logged in as its own
agent (its own token and config directory), as coding agents run it. At 1
and 8 clients, each repeats claim_next → checkpoint → finish (done) for
SECONDS after a warm-up; the cycle's p50/p99 and cycles/s are reported.

Over the run, `bench.mcp_cpu` reads `/proc`: CPU per cycle of the MCP server
processes, the web server (serve, the gunicorn master and workers) and the
database (the PostgreSQL processes serving the bench database), whose sum is
SPEC §20's figure (budget 15 ms); the load generator's processes, PostgreSQL's
shared processes and the whole machine are reported beside it. The tasks the
run finished are counted in the database and must match the cycles reported.
The tools/list size in bytes, as the client receives it, is a row of its own.
At one client, a separate traced session first counts the HTTP requests of
each tool call (`requests_per_cycle`; the list is in the JSON results).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from bench.cycles import fresh_fleet, release_pool
from bench.environment import Target
from bench.harness import percentile
from bench.http import create_agents, serving
from bench.mcp_cpu import CpuMeter, Groups
from bench.processes import PROJECT_ROOT
from bench.results import Row
from bench.sizes import Sizes

LEVELS = (1, 8)
SMOKE_LEVELS = (1,)
SECONDS = 15.0
SMOKE_SECONDS = 3.0
MCP_WORKERS = 2  # `manage.py serve`'s default: what an operator runs
TASKS = 6_000  # room for ~200 cycles/s over both levels' runs
SMOKE_TASKS = 400
READY_TIMEOUT_SECONDS = 240.0  # 8 clients and 8 MCP servers import on 2 busy cores
BUDGET_MS = 15
TOOLS_LIST_BUDGET_BYTES = 8 * 1024
WORKLOAD = "mcp: claim-checkpoint-finish"
TOOLS_WORKLOAD = "mcp: tools/list bytes"
OPERATIONS = ("claim_next", "checkpoint", "finish")


class McpBenchError(RuntimeError):
    pass


def _write_config(folder: Path, *, url: str, token: str, project: str) -> Path:
    """The agent's login, as `leasehold login` leaves it: a 0600 file in a 0700 directory of its own."""
    folder.mkdir(mode=0o700, parents=True)
    path = folder / "config.json"
    path.write_text(json.dumps({"url": url, "token": token, "project": project}))
    path.chmod(0o600)
    return path


class Clients:
    """The client processes of one level, and the one-line protocol of `bench.mcp_client`."""

    def __init__(self, configs: list[Path], *, seconds: float, logs: Path, trace: bool = False) -> None:
        env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
        env["PYTHONPATH"] = str(PROJECT_ROOT)
        self.logs = [logs / f"client-{index}.log" for index in range(len(configs))]
        self.processes: list[subprocess.Popen[str]] = []
        for index, (config, log) in enumerate(zip(configs, self.logs, strict=True)):
            with log.open("w") as stderr:
                command = [sys.executable, "-m", "bench.mcp_client", "--config", str(config), "--seconds", str(seconds)]
                if trace and index == 0:
                    command += ["--trace", str(logs / "trace.jsonl")]
                self.processes.append(
                    subprocess.Popen(
                        command,
                        cwd=PROJECT_ROOT,
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                    )
                )

    @property
    def pids(self) -> set[int]:
        return {process.pid for process in self.processes}

    def read_all(self, timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        return [self._read(index, deadline) for index in range(len(self.processes))]

    def _read(self, index: int, deadline: float) -> dict[str, Any]:
        process = self.processes[index]
        stdout: IO[str] | None = process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = stdout.readline() if ready else ""
        if not line:
            tail = self.logs[index].read_text()[-800:]
            raise McpBenchError(f"MCP client {index} said nothing (exit {process.poll()}): {tail}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def tell(self, word: str) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(word + "\n")
            process.stdin.flush()

    def close(self) -> None:
        for process in self.processes:
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _done_tasks(project: Any) -> int:
    from ledger.models import Task

    return Task.objects.filter(project=project, status="done").count()


def _ms_per_cycle(seconds: float, cycles: int) -> float | None:
    return round(1000 * seconds / cycles, 2) if cycles else None


def _level(
    target: Target,
    project: Any,
    configs: list[Path],
    *,
    seconds: float,
    logs: Path,
    web_pid: int,
    database: str | None,
) -> Row:
    """One run of len(configs) clients: warm up, measure CPU around the timed cycles, count what was done."""
    from bench.mcp_client import TRACED_CYCLES, WARMUP_CYCLES

    before = _done_tasks(project)
    clients = Clients(configs, seconds=seconds, logs=logs, trace=len(configs) == 1)
    try:
        greetings = clients.read_all(READY_TIMEOUT_SECONDS)
        meter = CpuMeter(Groups(client_pids=clients.pids, web_pid=web_pid, database=database))
        began = time.perf_counter()
        meter.start()
        clients.tell("go")
        results = clients.read_all(seconds + 120)
        spent = meter.stop()
        wall = time.perf_counter() - began
        clients.tell("end")
    finally:
        clients.close()
    done = _done_tasks(project) - before
    samples: dict[str, list[float]] = {name: [] for name in (*OPERATIONS, "cycle")}
    errors: list[str] = []
    for result in results:
        for name, values in result["samples"].items():
            samples[name] += values
        errors += result["errors"]
        if result["nothing_claimable"]:
            errors.append("a client ran out of claimable tasks: the run is too short of tasks")
    cycles = len(samples["cycle"])
    requests = greetings[0]["requests"]
    expected = cycles + WARMUP_CYCLES * len(configs) + (TRACED_CYCLES if requests is not None else 0)
    if done != expected:
        errors.append(f"{done} tasks done in the database, {expected} cycles reported (warm-up included)")
    active = max((result["seconds"] for result in results), default=0.0)
    p50, p99 = percentile(samples["cycle"], 0.50), percentile(samples["cycle"], 0.99)
    counted = spent["mcp"] + spent["web"] + spent["db"]
    extra: dict[str, Any] = {
        "cpu_ms_per_cycle": _ms_per_cycle(counted, cycles),
        "mcp_servers_ms": _ms_per_cycle(spent["mcp"], cycles),
        "web_ms": _ms_per_cycle(spent["web"], cycles),
        "db_ms": _ms_per_cycle(spent["db"], cycles),
        "pg_shared_ms": _ms_per_cycle(spent["db_shared"], cycles),
        "clients_ms": _ms_per_cycle(spent["clients"], cycles),
        "machine_ms": _ms_per_cycle(spent["machine"], cycles),
        "cpu_wall_s": round(wall, 2),
        **{f"{name}_p50_ms": round(1000 * statistics.median(samples[name]), 1) for name in OPERATIONS if samples[name]},
        "workers": MCP_WORKERS,
        **({} if requests is None else {"requests_per_cycle": sum(len(made) for made in requests.values())}),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "budget_ms": BUDGET_MS,
        "_tools_list_bytes": greetings[0]["tools_list_bytes"],
        **({} if requests is None else {"_requests": requests}),
    }
    return Row(
        database=target.vendor,
        workload=WORKLOAD,
        mode="mcp",
        concurrency=len(configs),
        ops=cycles,
        seconds=round(active, 3),
        throughput=round(cycles / active, 1) if active else None,
        p50_ms=None if p50 is None else round(1000 * p50, 2),
        p99_ms=None if p99 is None else round(1000 * p99, 2),
        outcomes={"cycles": cycles},
        errors=errors[:5],
        extra=extra,
    )


def mcp(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    from django.db import connection

    from bench import data

    smoke = sizes.w1_tasks < 10_000
    levels, seconds = (SMOKE_LEVELS, SMOKE_SECONDS) if smoke else (LEVELS, SECONDS)
    fleet = fresh_fleet("mcp", agents=0, tasks=SMOKE_TASKS if smoke else TASKS)
    agents = create_agents(fleet.project, max(levels), prefix=f"{fleet.project.slug}-a")
    database = str(connection.settings_dict["NAME"]) if target.is_postgres else None
    data.analyze()
    release_pool()
    # The clients' logins and logs (with their MCP servers' stderr); kept when a level reported errors.
    logs = Path(tempfile.mkdtemp(prefix=f"leasehold-bench-{fleet.project.slug}-"))
    rows: list[Row] = []
    with serving(target, workers=MCP_WORKERS) as server:
        url = f"http://{server.host}:{server.port}"
        for level in levels:
            folder = logs / f"clients-{level}"
            configs = [
                _write_config(folder / f"agent-{index}", url=url, token=token, project=fleet.project.slug)
                for index, (_, token) in enumerate(agents[:level])
            ]
            rows.append(
                _level(
                    target,
                    fleet.project,
                    configs,
                    seconds=seconds,
                    logs=folder,
                    web_pid=server.pid,
                    database=database,
                )
            )
    if any(row.errors for row in rows):
        rows[0].extra["logs"] = str(logs)
    else:
        shutil.rmtree(logs, ignore_errors=True)
    size = rows[0].extra["_tools_list_bytes"]
    rows.append(
        Row(
            database=target.vendor,
            workload=TOOLS_WORKLOAD,
            mode="mcp",
            concurrency=1,
            ops=1,
            seconds=0.0,
            throughput=None,
            p50_ms=None,
            p99_ms=None,
            extra={"bytes": size, "budget_bytes": TOOLS_LIST_BUDGET_BYTES},
        )
    )
    return rows, {}
