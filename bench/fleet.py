"""SPEC §20's fleet-shaped hot race through HTTP (`python -m bench run --only fleet`).

One production server (`manage.py serve --no-cluster` with the server's
default `--workers`, 2) on a project of 4 ready tasks. The load generator is
separate OS processes (`python -m bench.fleet`, no Django in them), each with
its agents as threads; every agent keeps one `http.client` connection alive
and loops claim-next → (if granted) renew → checkpoint note → finish, with
`THINK_SECONDS` (100 ms) after every call. The finish is a handoff, as W2's
is: the finish itself returns the task to ready, so the 4 tasks are re-armed
by the ordinary finish path and nothing else writes to the database.

Two shapes: the fleet (8 processes x 8 agents) and one client (1 x 1). Each
row reports claim p50/p99 over every claim and over the granted ones, the
outcomes (`TASK_TAKEN` and nothing-claimable are expected; any other answer is
an error, counted by its code), cycles/s, and whole-machine CPU per finished
cycle from `/proc` over the run (`bench.proc_cpu`): the server's process
tree, the database's backends (PostgreSQL; SQLite's work is inside the
server), and the load generator's processes, each apart.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from bench import http as served
from bench.environment import Target
from bench.harness import percentile
from bench.proc_cpu import DatabaseCpu, process_cpu_seconds
from bench.processes import PROJECT_ROOT
from bench.results import Row

SERVER_DEFAULT_WORKERS = 2  # `manage.py serve --workers`' default
SERVER_DEFAULT_THREADS = 8  # and `--threads`'
TASKS = 4
THINK_SECONDS = 0.1
FLEET = (8, 8)  # client processes x agents in each
ONE_CLIENT = (1, 1)
SECONDS = 20.0
EXPECTED = ("task_taken", "nothing_claimable")


def fleet(target: Target, sizes: Any) -> tuple[list[Row], dict[str, Any]]:
    from bench import cycles, data
    from bench.sizes import SMOKE

    smoke = sizes is SMOKE
    shapes = [ONE_CLIENT, (2, 2)] if smoke else [ONE_CLIENT, FLEET]
    if os.environ.get("LEASEHOLD_BENCH_FLEET_ONE_CLIENT_ONLY"):
        shapes = [ONE_CLIENT]  # the 1 x 1 row alone (the lean path's before/after, issue 34)
    seconds = float(os.environ.get("LEASEHOLD_BENCH_FLEET_SECONDS", "") or (3.0 if smoke else SECONDS))
    projects = []
    for processes, agents in [ONE_CLIENT, *shapes]:  # the first is the warm-up
        project = cycles.fresh_fleet("fleet", agents=0, tasks=TASKS).project
        made = served.create_agents(project, processes * agents, prefix=f"{project.slug}-a")
        projects.append((processes, agents, project.slug, [token for _, token in made]))
    data.analyze()
    cycles.release_pool()
    rows: list[Row] = []
    workers, threads = server_shape()
    with served.serving(target, workers=workers, threads=threads) as server:
        warm, *measured = projects
        race(target, server, *warm, seconds=1.0 if smoke else 3.0)
        rest = at_rest(server, 1.0 if smoke else 3.0)
        for processes, agents, slug, tokens in measured:
            row = race(target, server, processes, agents, slug, tokens, seconds=seconds)
            row.extra["server_cpu_at_rest_ms_per_s"] = rest
            rows.append(row)
    return rows, {}


def server_shape() -> tuple[int, int]:
    """The server's default workers and threads, or the shape LEASEHOLD_BENCH_FLEET_WORKERS and
    LEASEHOLD_BENCH_FLEET_THREADS name (to compare shapes when choosing the defaults, issue 20)."""
    workers = int(os.environ.get("LEASEHOLD_BENCH_FLEET_WORKERS", "") or SERVER_DEFAULT_WORKERS)
    threads = int(os.environ.get("LEASEHOLD_BENCH_FLEET_THREADS", "") or SERVER_DEFAULT_THREADS)
    return workers, threads


def at_rest(server: served.Server, seconds: float) -> float:
    """The server's CPU milliseconds per second with no request in flight (its idle cost, inside every figure)."""
    before = process_cpu_seconds(server.pid)
    time.sleep(seconds)
    return round((process_cpu_seconds(server.pid) - before) * 1000 / seconds, 1)


def race(
    target: Target, server: served.Server, processes: int, agents: int, slug: str, tokens: list[str], *, seconds: float
) -> Row:
    """One run of `processes` x `agents` for `seconds`; its row."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    start_at = time.time() + 1.5  # a child without Django starts in well under a second
    children = []
    for index in range(processes):
        command = [sys.executable, "-m", "bench.fleet", str(server.port), slug, str(seconds), str(start_at)]
        child = subprocess.Popen(
            command, env=env, cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert child.stdin is not None
        child.stdin.write(json.dumps(tokens[index * agents : (index + 1) * agents]).encode())
        child.stdin.close()
        child.stdin = None  # written and closed: `communicate` below only reads
        children.append(child)
    database = DatabaseCpu(target)
    time.sleep(max(0.0, start_at - time.time()))
    server_before = process_cpu_seconds(server.pid)
    database.start()
    load_before = os.getloadavg()[0]
    results, failures = [], []
    for child in children:
        out, err = child.communicate(timeout=seconds + 120)
        if child.returncode != 0:
            failures.append(f"client process exited {child.returncode}: {err.decode().strip().splitlines()[-1:]}")
            continue
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    server_cpu = process_cpu_seconds(server.pid) - server_before
    database_cpu = database.stop()
    return _row(target, processes, agents, results, failures, server_cpu, database_cpu, load_before)


def _row(
    target: Target,
    processes: int,
    agents: int,
    results: list[dict[str, Any]],
    failures: list[str],
    server_cpu: float,
    database_cpu: dict[str, Any],
    load_before: float,
) -> Row:
    claims = [sample for result in results for sample in result["claim"]]
    granted = [sample for result in results for sample in result["granted"]]
    cycles = sum(result["cycles"] for result in results)
    requests = sum(result["requests"] for result in results)
    elapsed = max((result["seconds"] for result in results), default=0.0)
    outcomes: Counter[str] = Counter()
    by_code: Counter[str] = Counter()
    samples: list[str] = []
    for result in results:
        outcomes.update(result["outcomes"])
        by_code.update(result["errors"])
        samples += result["samples"]
    loadgen_cpu = sum(result["cpu_s"] for result in results)

    def per_cycle(cpu: float | None) -> float | None:
        return None if cpu is None or not cycles else round(cpu * 1000 / cycles, 2)

    db_cpu = database_cpu.get("backends_s")
    machine_cpu = server_cpu + (db_cpu or 0.0)
    p50, p99 = percentile(claims, 0.5), percentile(claims, 0.99)
    g50, g99 = percentile(granted, 0.5), percentile(granted, 0.99)
    extra: dict[str, Any] = {
        "processes": processes,
        "agents_each": agents,
        "server_workers": server_shape()[0],
        "server_threads": server_shape()[1],
        "think_ms": round(THINK_SECONDS * 1000),
        "tasks": TASKS,
        "claims": len(claims),
        "requests": requests,
        "cycles_per_s": round(cycles / elapsed, 1) if elapsed else None,
        "granted_p50_ms": None if g50 is None else round(g50 * 1000, 2),
        "granted_p99_ms": None if g99 is None else round(g99 * 1000, 2),
        "errors_by_code": dict(by_code),
        "machine_cpu_ms_per_cycle": per_cycle(machine_cpu),
        "server_cpu_ms_per_cycle": per_cycle(server_cpu),
        "database_cpu_ms_per_cycle": per_cycle(db_cpu),
        "loadgen_cpu_ms_per_cycle": per_cycle(loadgen_cpu),
        "machine_cpu_ms_per_request": round(machine_cpu * 1000 / requests, 2) if requests else None,
        "reconnects": sum(result["reconnects"] for result in results),
        "load_average_1m": round(load_before, 2),
    }
    if target.is_postgres:
        extra["database_backends_seen"] = database_cpu.get("backends_seen")
        extra["database_backends_ended"] = database_cpu.get("backends_ended")
        extra["postgres_cluster_cpu_ms_per_cycle"] = per_cycle(database_cpu.get("cluster_s"))
    else:
        extra["database_cpu"] = "inside the server processes (SQLite)"
    errors = [*failures, *(f"{count}x {code}" for code, count in by_code.items()), *samples[:3]]
    return Row(
        database=target.vendor,
        workload=f"fleet race, {processes}x{agents} agents",
        mode="http",
        concurrency=processes * agents,
        ops=cycles,
        seconds=round(elapsed, 3),
        throughput=round(cycles / elapsed, 1) if elapsed else None,
        p50_ms=None if p50 is None else round(p50 * 1000, 2),
        p99_ms=None if p99 is None else round(p99 * 1000, 2),
        outcomes={**{key: outcomes[key] for key in EXPECTED}, "granted": len(granted)},
        errors=errors,
        extra=extra,
    )


# --- the client process ---------------------------------------------------------------------------


class Agent:
    """One agent's kept-alive connection to the server."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.reconnects = 0

    def call(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        payload = json.dumps(body).encode()
        all_headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
            "Content-Type": "application/json",
            **(headers or {}),
        }
        for attempt in (1, 2):
            try:
                self.connection.request("POST", path, body=payload, headers=all_headers)
                response = self.connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed a kept-alive connection before reading the request: send it again.
                self.connection.close()
                self.reconnects += 1
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def error_code(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "UNPARSED"


def agent_loop(agent: Agent, slug: str, deadline: float, record: dict[str, Any]) -> None:
    finish = {"outcome": "handoff", "interruption_reason_code": "handoff", "result_summary": "bench"}
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        status, raw = agent.call("/api/v1/claims/next/", {"project": slug})
        took = time.perf_counter() - started
        record["requests"] += 1
        record["claim"].append(took)
        time.sleep(THINK_SECONDS)
        if status == 204:
            record["outcomes"]["nothing_claimable"] += 1
            continue
        if status != 201:
            code = error_code(raw)
            if code == "TASK_TAKEN":
                record["outcomes"]["task_taken"] += 1
            else:
                record["errors"][f"claim {status} {code}"] += 1
                record["samples"].append(f"claim {status}: {raw[:160]!r}")
            continue
        record["granted"].append(took)
        grant = json.loads(raw)
        attempt = grant["attempt"]["id"]
        holder = {"X-Lease-Token": grant["lease_token"], "X-Lease-Epoch": str(grant["epoch"])}
        for name, path, body, expected in (
            ("renew", f"/api/v1/attempts/{attempt}/renew/", {}, 200),
            ("note", f"/api/v1/attempts/{attempt}/notes/", served.NOTE_BODY, 201),
            ("finish", f"/api/v1/attempts/{attempt}/finish/", finish, 200),
        ):
            status, raw = agent.call(path, body, holder)
            record["requests"] += 1
            time.sleep(THINK_SECONDS)
            if status != expected:
                record["errors"][f"{name} {status} {error_code(raw)}"] += 1
                record["samples"].append(f"{name} {status}: {raw[:160]!r}")
                break
        else:
            record["cycles"] += 1


def _guarded(agent: Agent, slug: str, deadline: float, record: dict[str, Any]) -> None:
    try:
        agent_loop(agent, slug, deadline, record)
    except Exception as exc:  # counted as an error of the run, not a lost thread
        record["errors"][type(exc).__name__] += 1
        record["samples"].append(f"{type(exc).__name__}: {str(exc)[:160]}")


def client_main(port: int, slug: str, seconds: float, start_at: float, tokens: list[str]) -> dict[str, Any]:
    """A client process: its agents as threads from `start_at` for `seconds`; its results and CPU."""
    agents = [Agent(port, token) for token in tokens]
    records: list[dict[str, Any]] = [
        {"claim": [], "granted": [], "cycles": 0, "requests": 0}
        | {"outcomes": Counter(), "errors": Counter(), "samples": []}
        for _ in agents
    ]
    time.sleep(max(0.0, start_at - time.time()))
    cpu_before, started = _own_cpu(), time.perf_counter()
    deadline = started + seconds
    threads = [
        threading.Thread(target=_guarded, args=(agent, slug, deadline, record), daemon=True)
        for agent, record in zip(agents, records, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 90)
    merged: dict[str, Any] = {
        "seconds": time.perf_counter() - started,
        "cpu_s": _own_cpu() - cpu_before,
        "claim": [sample for record in records for sample in record["claim"]],
        "granted": [sample for record in records for sample in record["granted"]],
        "cycles": sum(record["cycles"] for record in records),
        "requests": sum(record["requests"] for record in records),
        "outcomes": sum((record["outcomes"] for record in records), Counter()),
        "errors": sum((record["errors"] for record in records), Counter()),
        "samples": [sample for record in records for sample in record["samples"]][:3],
        "reconnects": sum(agent.reconnects for agent in agents),
    }
    hung = sum(thread.is_alive() for thread in threads)
    if hung:
        merged["errors"][f"{hung} agents did not finish"] += 1
    return merged


def _own_cpu() -> float:
    # The process's CPU clock, in nanoseconds: os.times() counts 10 ms ticks, too coarse for one agent.
    return time.process_time()


if __name__ == "__main__":
    port, slug, seconds, start_at = sys.argv[1:5]
    result = client_main(int(port), slug, float(seconds), float(start_at), json.loads(sys.stdin.read()))
    print(json.dumps(result))
