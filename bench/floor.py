"""The floor (issue 34, SPEC §24; `python -m bench run --only floor`): what the agent cycle costs with no web
framework at all, beside the raw replay and Leasehold, in whole-machine CPU.

Three ways of doing the same agent cycle (claim-next, renew, checkpoint note,
finish done), each measured as whole-machine CPU per cycle (the client's
thread, the server's process tree, PostgreSQL's backends of the bench
database; SQLite's engine is inside whichever process runs the statements):

- `raw`: the raw replay (bench/replay.py) of the cycle's captured service
  statements, in this process, through psycopg or sqlite3.
- `floor`: a bare WSGI application (bench/floor_app.py, no Django) served by
  gunicorn with `manage.py serve`'s command line (`serve.gunicorn_command`:
  the same worker class, workers and threads), answering the same four HTTP
  requests — paths, methods, headers, JSON request bodies — with the same
  statements as the raw replay and responses filled from the ones Leasehold
  gave in a recorded cycle (same status, headers and body size).
- `leasehold`: `manage.py serve --no-cluster` (bench/http.py), the same
  client; and `leasehold keyed`, the same with an `Idempotency-Key` on
  claim-next, the note and finish (as the MCP server sends them; renew
  without, as the CLI sends it).

The client is one agent on one kept-alive `http.client` connection, cycles
back to back, in this process's main thread (its CPU is `time.thread_time`,
so the backend sampler's thread is not in it). The modes take turns, `RUNS`
times, so the machine's load falls on each alike; each row's `ratio` is to
the mode below it in the same turn (leasehold / floor, floor / raw).
`LEASEHOLD_BENCH_FLOOR_PROFILE=1` then profiles Leasehold's workers under
the same client (cProfile per request thread, timed by the thread's CPU;
bench/floor_profile.py) and adds the per-layer split to the leasehold row.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import http.client
import json
import os
import pickle
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import http as served
from bench import ops
from bench.capture import JsonTemplate, Sym, Trace
from bench.environment import Target
from bench.fleet import at_rest
from bench.harness import percentile
from bench.proc_cpu import DatabaseCpu, process_cpu_seconds
from bench.processes import PROJECT_ROOT
from bench.results import Row

WORKLOAD = "floor: machine CPU per HTTP cycle"
RUNS = 3
CYCLES = 200
WARMUP_CYCLES = 20
SMOKE_RUNS, SMOKE_CYCLES, SMOKE_WARMUP = 1, 8, 3
MODES = ("raw", "floor", "leasehold", "leasehold keyed")
SERVER_WORKERS, SERVER_THREADS = 2, 8  # `manage.py serve`'s defaults (bench.fleet's server shape)
REST_SECONDS = 3.0
FINISH_BODY = {"outcome": "done", "result_summary": "bench"}
KEYED = ("claim", "notes", "finish")  # the requests the MCP server sends with an Idempotency-Key
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


class Client:
    """One agent on one kept-alive connection; `call` returns status, headers and body."""

    def __init__(self, port: int, token: str, *, keyed: bool = False) -> None:
        self.port, self.token, self.keyed = port, token, keyed
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def close(self) -> None:
        self.connection.close()

    def call(
        self, name: str, path: str, body: Any, holder: dict[str, str] | None = None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
            "Content-Type": "application/json",
            **(holder or {}),
        }
        if self.keyed and name in KEYED:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        self.connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = self.connection.getresponse()
        return response.status, response.getheaders(), response.read()

    def cycle(self, slug: str) -> list[tuple[str, int, list[tuple[str, str]], bytes, int]]:
        """One cycle; each request's (name, status, headers, body, request body bytes). Raises on a wrong answer."""
        answers = []
        claim = {"project": slug}
        status, headers, raw = self.call("claim", "/api/v1/claims/next/", claim)
        answers.append(("claim", status, headers, raw, len(json.dumps(claim))))
        if status != 201:
            raise RuntimeError(f"claim-next answered {status}: {raw[:200]!r}")
        grant = json.loads(raw)
        attempt = grant["attempt"]["id"]
        holder = {"X-Lease-Token": grant["lease_token"], "X-Lease-Epoch": str(grant["epoch"])}
        for name, expected, body in (
            ("renew", 200, {}),
            ("notes", 201, served.NOTE_BODY),
            ("finish", 200, FINISH_BODY),
        ):
            status, headers, raw = self.call(name, f"/api/v1/attempts/{attempt}/{name}/", body, holder)
            answers.append((name, status, headers, raw, len(json.dumps(body))))
            if status != expected:
                raise RuntimeError(f"{name} answered {status}: {raw[:200]!r}")
        return answers


# --- the floor's server ---------------------------------------------------------------------------


def _templated(value: Any, known: dict[Any, str], later: datetime) -> Any:
    """The recorded JSON with the cycle's own values (ids, token, key, branch, label, times) as symbols."""
    if isinstance(value, dict):
        return {key: _templated(item, known, later) for key, item in value.items()}
    if isinstance(value, list):
        return [_templated(item, known, later) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and value >= 100_000 and value in known:
        return Sym(known[value])
    if isinstance(value, str):
        if value in known:
            return Sym(known[value])
        if _ISO.match(value):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return Sym("expires_iso" if moment > later else "now_iso")
    return value


def record(server: served.Server, slug: str, token: str) -> dict[str, Any]:
    """One cycle through Leasehold: each answer's status, headers and JSON as a template for the floor."""
    from leases.models import Attempt, Note

    client = Client(server.port, token)
    try:
        client.cycle(slug)  # warm
        recorded_at = datetime.now(UTC)
        answers = client.cycle(slug)
    finally:
        client.close()
    grant = json.loads(answers[0][3])
    attempt = Attempt.objects.select_related("task").get(pk=grant["attempt"]["id"])
    note = Note.objects.filter(attempt=attempt).latest("pk")
    known: dict[Any, str] = {
        attempt.pk: "attempt_id",
        attempt.task_id: "task_id",
        attempt.task.key: "key",
        grant["lease_token"]: "lease_token",
        attempt.branch: "branch",
        attempt.label: "label",
        note.pk: "note_id",
        attempt.agent_id: "agent_id",
        attempt.task.project_id: "project_id",
    }
    later = recorded_at + timedelta(seconds=60)
    skip = {"date", "server", "connection", "content-length", "transfer-encoding"}
    result = {}
    for name, status, headers, body, request_bytes in answers:
        result[name] = {
            "status": status,
            "headers": [(key, value) for key, value in headers if key.lower() not in skip],
            "template": _templated(json.loads(body), known, later),
            "response_bytes": len(body),
            "request_bytes": request_bytes,
        }
    return result


def _plain(value: Any) -> Any:
    """`value` without Django's enum types (TextChoices are str subclasses the floor cannot unpickle)."""
    if isinstance(value, enum.Enum):
        return value.value
    if type(value).__module__ == "psycopg.types.json":  # Jsonb / Json around a constant
        return type(value)(_plain(value.obj), value.dumps)
    if isinstance(value, JsonTemplate):
        return dataclasses.replace(value, template=_plain(value.template))
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(item) for item in value)
    return value


def _plain_trace(trace: Trace) -> Trace:
    steps = [
        step if isinstance(step, str) else dataclasses.replace(step, params=[_plain(param) for param in step.params])
        for step in trace.steps
    ]
    return dataclasses.replace(trace, steps=steps)


def write_spec(target: Target, captured: list[ops.CapturedOp], answers: dict[str, Any], agents: list[Any]) -> Path:
    """The floor server's pickle: traces, answers and the agents it knows (by token hash)."""
    names = ("claim", "renew", "notes", "finish")
    folder = Path(tempfile.mkdtemp(prefix="leasehold-floor-"))
    path = folder / "spec.pickle"
    spec = {
        "vendor": target.vendor,
        "dsn": target.dsn,
        "traces": {name: _plain_trace(op.trace) for name, op in zip(names, captured, strict=True)},
        "answers": answers,
        "agents": {
            hashlib.sha256(token.encode()).hexdigest(): {
                "agent_id": agent.pk,
                "handle": agent.handle,
                "project_id": project.pk,
                "slug": project.slug,
            }
            for agent, token, project in agents
        },
    }
    path.write_bytes(pickle.dumps(spec))
    return path


@contextmanager
def floor_serving(target: Target, spec: Path, *, workers: int, threads: int) -> Iterator[served.Server]:
    """bench/floor_app.py under gunicorn, with `manage.py serve`'s command line, until the block ends."""
    from operations.management.commands.serve import gunicorn_command

    port = served.free_port()
    command = gunicorn_command(
        "bench.floor_app:application", bind=f"127.0.0.1:{port}", workers=workers, threads=threads
    )
    env = {
        **os.environ,
        **target.env,
        "PYTHONPATH": str(PROJECT_ROOT),
        "LEASEHOLD_BENCH_FLOOR_SPEC": str(spec),
        # serve's defaults for HeadFirstWorker (config/gunicorn.py)
        "LEASEHOLD_HEAD_TIMEOUT_SECONDS": "10.0",
        "LEASEHOLD_BODY_TIMEOUT_SECONDS": "20.0",
        "LEASEHOLD_SOCKET_TIMEOUT_SECONDS": "30.0",
    }
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
        server = served.Server("127.0.0.1", port, process.pid)
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    errors.seek(0)
                    raise served.HttpError(f"the floor exited {process.returncode}: {errors.read()[-800:]!r}")
                try:
                    status, _ = server.call("POST", "/api/v1/claims/next/", token=served.UNAUTHENTICATED, body={})
                    if status == 401:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise served.HttpError("the floor did not answer within 60 s")
                time.sleep(0.2)
            yield server
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


# --- measuring ------------------------------------------------------------------------------------


def _spent(target: Target, server_pid: int | None, loop: Any) -> dict[str, Any]:
    """Run `loop()` (returns the cycles' wall times); CPU of the client thread, the server tree, the backends."""
    database = DatabaseCpu(target)
    server_before = process_cpu_seconds(server_pid) if server_pid else 0.0
    database.start()
    load = os.getloadavg()[0]
    client_before = time.thread_time()
    walls = loop()
    client = time.thread_time() - client_before
    server = (process_cpu_seconds(server_pid) - server_before) if server_pid else 0.0
    backends = database.stop().get("backends_s", 0.0)
    return {"walls": walls, "client_s": client, "server_s": server, "database_s": backends, "load": load}


def measure_raw(target: Target, fleet: Any, captured: list[ops.CapturedOp], cycles: int, warm: int) -> dict[str, Any]:
    from bench.replay import RawConnection

    raw = RawConnection(target.vendor, target.dsn)
    agent = ops.raw_agent(raw, agent=fleet.agents[0], project=fleet.project)

    def cycle() -> None:
        for op in captured:
            outcome = ops.raw_op(agent, op)
            if outcome != "ok":
                raise RuntimeError(f"the raw replay of {op.spec.name} stopped: {outcome}")

    def loop() -> list[float]:
        walls = []
        for _ in range(cycles):
            began = time.perf_counter()
            cycle()
            walls.append(time.perf_counter() - began)
        return walls

    try:
        for _ in range(warm):
            cycle()
        return _spent(target, None, loop)
    finally:
        raw.close()


def measure_http(
    target: Target, server: served.Server, slug: str, token: str, cycles: int, warm: int, *, keyed: bool = False
) -> dict[str, Any]:
    client = Client(server.port, token, keyed=keyed)

    def loop() -> list[float]:
        walls = []
        for _ in range(cycles):
            began = time.perf_counter()
            client.cycle(slug)
            walls.append(time.perf_counter() - began)
        return walls

    try:
        for _ in range(warm):
            client.cycle(slug)
        return _spent(target, server.pid, loop)
    finally:
        client.close()


def _row(vendor: str, mode: str, turn: int, spent: dict[str, Any]) -> Row:
    walls = spent["walls"]
    cycles = len(walls)

    def per_cycle(seconds: float) -> float:
        return round(seconds * 1000 / cycles, 2)

    machine = spent["client_s"] + spent["server_s"] + spent["database_s"]
    return Row(
        database=vendor,
        workload=WORKLOAD,
        mode=mode,
        concurrency=1,
        ops=cycles,
        seconds=round(sum(walls), 3),
        throughput=round(cycles / sum(walls), 1) if walls else None,
        p50_ms=round(1000 * (percentile(walls, 0.5) or 0), 2),
        p99_ms=round(1000 * (percentile(walls, 0.99) or 0), 2),
        extra={
            "turn": turn,
            "machine_cpu_ms_per_cycle": per_cycle(machine),
            # SPEC §24's reading: the load generator excluded (the raw replay's process is its own server)
            "budget_cpu_ms_per_cycle": per_cycle(machine - (spent["client_s"] if mode != "raw" else 0.0)),
            "client_cpu_ms_per_cycle": per_cycle(spent["client_s"]),
            "server_cpu_ms_per_cycle": per_cycle(spent["server_s"]),
            "database_cpu_ms_per_cycle": per_cycle(spent["database_s"]) if vendor == "postgresql" else None,
            "load_average_1m": round(spent["load"], 2),
        },
    )


def _ratios(rows: list[Row]) -> None:
    """In each turn: floor / raw on the floor row, leasehold / floor on Leasehold's rows, all to raw beside."""
    by_turn: dict[int, dict[str, Row]] = {}
    for row in rows:
        by_turn.setdefault(row.extra["turn"], {})[row.mode] = row
    for turn in by_turn.values():
        raw = turn["raw"].extra["machine_cpu_ms_per_cycle"]
        floor = turn["floor"].extra["machine_cpu_ms_per_cycle"]
        raw_budget = turn["raw"].extra["budget_cpu_ms_per_cycle"]
        floor_budget = turn["floor"].extra["budget_cpu_ms_per_cycle"]
        for row in turn.values():
            budget = row.extra["budget_cpu_ms_per_cycle"]
            row.extra["budget_ratio_to_raw"] = round(budget / raw_budget, 2) if raw_budget else None
            row.extra["budget_ratio_to_floor"] = round(budget / floor_budget, 2) if floor_budget else None
            cpu = row.extra["machine_cpu_ms_per_cycle"]
            row.extra["ratio_to_raw"] = round(cpu / raw, 2) if raw else None
            row.extra["ratio_to_floor"] = round(cpu / floor, 2) if floor else None
            reference = {"floor": raw, "leasehold": floor, "leasehold keyed": floor}.get(row.mode)
            row.ratio = round(cpu / reference, 2) if reference else None


def floor(target: Target, sizes: Any) -> tuple[list[Row], dict[str, Any]]:
    from bench import cycles as cycles_module
    from bench import data
    from bench.sizes import SMOKE

    smoke = sizes is SMOKE
    runs, cycles, warm = (SMOKE_RUNS, SMOKE_CYCLES, SMOKE_WARMUP) if smoke else (RUNS, CYCLES, WARMUP_CYCLES)
    runs = int(os.environ.get("LEASEHOLD_BENCH_FLOOR_RUNS", "") or runs)
    cycles = int(os.environ.get("LEASEHOLD_BENCH_FLOOR_CYCLES", "") or cycles)
    tasks = cycles + warm + 5
    specs = [ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.FINISH_DONE]
    captured = cycles_module.capture_ops("floor", specs)

    def http_project(name: str) -> tuple[Any, str, Any]:
        project = cycles_module.fresh_fleet(name, agents=0, tasks=tasks).project
        ((agent, token),) = served.create_agents(project, 1, prefix=f"{project.slug}-a")
        return agent, token, project

    turns: list[dict[str, Any]] = []
    for _ in range(runs):
        turns.append(
            {
                "raw": cycles_module.fresh_fleet("floor-raw", agents=1, tasks=tasks),
                "floor": http_project("floor-bare"),
                "leasehold": http_project("floor-lh"),
                "leasehold keyed": http_project("floor-lhk"),
            }
        )
    recording = http_project("floor-rec")
    profiling = http_project("floor-prof") if os.environ.get("LEASEHOLD_BENCH_FLOOR_PROFILE") else None
    data.analyze()
    cycles_module.release_pool()
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    with served.serving(target, workers=SERVER_WORKERS, threads=SERVER_THREADS) as leasehold:
        answers = record(leasehold, recording[2].slug, recording[1])
        spec = write_spec(target, captured, answers, [turn["floor"] for turn in turns])
        cycles_module.release_pool()
        with floor_serving(target, spec, workers=SERVER_WORKERS, threads=SERVER_THREADS) as bare:
            # Each server's CPU with no request in flight (inside every figure, as in bench.fleet's rows).
            rest = {"floor": at_rest(bare, REST_SECONDS), "leasehold": at_rest(leasehold, REST_SECONDS)}
            for number, turn in enumerate(turns, 1):
                spent = {
                    "raw": measure_raw(target, turn["raw"], captured, cycles, warm),
                    "floor": measure_http(target, bare, turn["floor"][2].slug, turn["floor"][1], cycles, warm),
                    "leasehold": measure_http(
                        target, leasehold, turn["leasehold"][2].slug, turn["leasehold"][1], cycles, warm
                    ),
                    "leasehold keyed": measure_http(
                        target,
                        leasehold,
                        turn["leasehold keyed"][2].slug,
                        turn["leasehold keyed"][1],
                        cycles,
                        warm,
                        keyed=True,
                    ),
                }
                rows += [_row(target.vendor, mode, number, spent[mode]) for mode in MODES]
            floor_sizes = _floor_sizes(bare, turns[0]["floor"], answers)
    shutil.rmtree(spec.parent, ignore_errors=True)
    _ratios(rows)
    sizes_extra = {
        name: {"request_bytes": answer["request_bytes"], "leasehold_bytes": answer["response_bytes"]}
        for name, answer in answers.items()
    }
    for name, size in floor_sizes.items():
        sizes_extra[name]["floor_bytes"] = size
    for row in rows:
        if row.mode == "floor":
            row.extra["bodies"] = sizes_extra
        if row.mode != "raw":
            row.extra["server_cpu_at_rest_ms_per_s"] = rest["floor" if row.mode == "floor" else "leasehold"]
    if profiling is not None:
        from bench.floor_profile import profile_leasehold

        extra = profile_leasehold(target, profiling, cycles=cycles, warm=warm)
        for row in rows:
            if row.mode == "leasehold":
                row.extra["layers"] = extra
    return rows, {}


def _floor_sizes(server: served.Server, agent: tuple[Any, str, Any], answers: dict[str, Any]) -> dict[str, int]:
    """The floor's answer sizes for one more cycle (its project kept a few tasks spare)."""
    client = Client(server.port, agent[1])
    try:
        got = client.cycle(agent[2].slug)
    finally:
        client.close()
    return {name: len(body) for name, _, _, body, _ in got}


def summary(rows: list[Row]) -> str:
    """Ranges over the turns, per mode: machine CPU per cycle and the ratios (for the docs)."""
    lines = []
    for vendor in sorted({row.database for row in rows}):
        for mode in MODES:
            mine = [row for row in rows if row.database == vendor and row.mode == mode]
            if not mine:
                continue
            cpu = [row.extra["machine_cpu_ms_per_cycle"] for row in mine]
            ratio = [row.ratio for row in mine if row.ratio is not None]
            lines.append(
                f"{vendor} {mode}: {min(cpu)}-{max(cpu)} ms (median {statistics.median(cpu)})"
                + (f", ratio {min(ratio)}-{max(ratio)}" if ratio else "")
            )
    return "\n".join(lines)
