"""SPEC §18's waiter budget: 500 concurrent waiters on one machine while W3's claim p99 stays within 2x of the
idle figure (`python -m bench run --only waiters`).

One production server (`manage.py serve --no-cluster`, gunicorn with
`config.gunicorn.HeadFirstWorker`, which parks long-poll waiters in its event
loop) serves both:

- W3 agents (HTTP clients in this process, `bench.http`) doing claim-next,
  renew, note, finish in a project of their own; every claim call is timed.
- 500 long-poll waiters (`GET /api/v1/changes/?wait=30`) held by one child
  process (`python -m bench waiters`, asyncio streams: 500 sockets in one
  process cost little, and the child keeps its GIL away from the W3 clients).
  They belong to an agent of another project, so W3's events do not wake
  them: they stay parked, as a fleet's idle agents do.

Three phases, the same agents and length each: `idle` (no waiters), `parked`
(500 waiters parked) and `waking` (parked, and an event in the waiters'
project every `WAKE_EVERY_SECONDS` wakes all 500 at once, each re-reading the
feed and parking again). The parked and waking rows' ratio is their claim p99
over the idle one (budget ≤ 2); the waking row also reports how long after
an event's commit the waiters had it (p50/p99 over every waiter and event).
`LEASEHOLD_BENCH_WAITERS=20` runs the same with 20 waiters: the HTTP path's
wake latency without a herd of 500.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench import http
from bench.environment import Target
from bench.harness import percentile, run_threads
from bench.proc_cpu import process_cpu_seconds
from bench.processes import PROJECT_ROOT
from bench.results import Row, row_from_run

WAITERS = 500
WAIT_SECONDS = 30
WAKE_EVERY_SECONDS = 3.0
CONNECT_BATCH = 50


def waiters(target: Target, sizes: Any, *, workers: int) -> tuple[list[Row], dict[str, Any]]:
    from bench import cycles
    from bench.sizes import SMOKE

    smoke = sizes is SMOKE
    count, agents, seconds = (50, 2, 2.0) if smoke else (WAITERS, 4, 10.0)
    # Another number of waiters (e.g. 20, for the HTTP path's wake latency without a herd).
    count = int(os.environ.get("LEASEHOLD_BENCH_WAITERS", "") or count)
    w3 = cycles.fresh_fleet("w3wait", agents=0, tasks=sizes.w3_tasks)
    w3_agents = http.create_agents(w3.project, agents, prefix=f"{w3.project.slug}-a")
    quiet = cycles.fresh_fleet("quiet", agents=0, tasks=1)
    ((_, waiter_token),) = http.create_agents(quiet.project, 1, prefix=f"{quiet.project.slug}-w")
    from bench import data

    data.analyze()
    cycles.release_pool()
    tokens = [token for _, token in w3_agents]
    rows: list[Row] = []
    with http.serving(target, workers=workers) as server:
        run_threads(min(workers, 4), _warm(server, w3.project.slug, tokens), duration=1.0 if smoke else 3.0)
        rest_idle = _at_rest(server)
        idle, idle_cpu = _phase(server, w3.project.slug, tokens, seconds)
        idle_cpu["server_cpu_at_rest_s_per_s"] = rest_idle
        idle_row = row_from_run(
            target.vendor, f"W3 claim beside {count} waiters", "idle", idle, kind="claim", **idle_cpu
        )
        rows.append(idle_row)
        child = _start_waiters(target, server, waiter_token, count, seconds=3 * seconds + 60)
        try:
            connected = _read_line(child, "ready")
            connected["settle_s"] = _settle(server)
            rest_parked = _at_rest(server)
            parked, parked_cpu = _phase(server, w3.project.slug, tokens, seconds, child)
            parked_cpu["server_cpu_at_rest_s_per_s"] = rest_parked
            commits: dict[int, float] = {}
            stop = threading.Event()
            writer = threading.Thread(target=_wake_writer, args=(quiet.project, commits, stop))
            writer.start()
            try:
                waking, waking_cpu = _phase(server, w3.project.slug, tokens, seconds, child)
            finally:
                stop.set()
                writer.join()
            time.sleep(1.0)  # the last wake's answers
            child.stdin.write("stop\n")
            child.stdin.flush()
            result = _read_line(child, "result")
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
    seen = [max(0.0, arrived - commits[event]) for event, arrived in result["arrivals"] if event in commits]
    wake_p50, wake_p99 = percentile(seen, 0.5), percentile(seen, 0.99)
    common = {
        "waiters_connected": connected["connected"],
        "settle_s": connected["settle_s"],
        "waiter_errors": len(result["errors"]),
        "ratio_is": "claim p99 / idle claim p99",
    }
    for mode, run, cpu in (("parked", parked, parked_cpu), ("waking", waking, waking_cpu)):
        row = row_from_run(target.vendor, f"W3 claim beside {count} waiters", mode, run, kind="claim", **common, **cpu)
        if row.p99_ms and idle_row.p99_ms:
            row.ratio = round(row.p99_ms / idle_row.p99_ms, 2)
        if mode == "waking":
            row.extra.update(
                wake_events=len(commits),
                wake_sightings=len(seen),
                wake_p50_ms=None if wake_p50 is None else round(wake_p50 * 1000, 1),
                wake_p99_ms=None if wake_p99 is None else round(wake_p99 * 1000, 1),
            )
        row.errors = [*row.errors, *result["errors"][:3]]
        rows.append(row)
    return rows, {}


def _phase(server: http.Server, slug: str, tokens: list[str], seconds: float, child: Any = None) -> tuple[Any, dict]:
    """W3 for `seconds`; and the CPU seconds the server (and the waiter process) used meanwhile."""
    server_before = process_cpu_seconds(server.pid)
    child_before = process_cpu_seconds(child.pid) if child is not None else 0.0
    run = _claims(server, slug, tokens, seconds)
    cpu = {"server_cpu_s": round(process_cpu_seconds(server.pid) - server_before, 2)}
    if child is not None:
        cpu["waiter_process_cpu_s"] = round(process_cpu_seconds(child.pid) - child_before, 2)
    return run, cpu


def _settle(server: http.Server, *, quiet: float = 0.05, longest: float = 60.0) -> float:
    """Wait until the waiters' first requests have all run and parked: the server's CPU use falls to `quiet`.

    The waiter process says it is ready once its 500 connections are open and
    their requests sent; the server takes seconds more to run them all.
    """
    started = time.monotonic()
    while time.monotonic() - started < longest:
        before = process_cpu_seconds(server.pid)
        time.sleep(0.5)
        if process_cpu_seconds(server.pid) - before <= quiet * 0.5:
            break
    return round(time.monotonic() - started, 1)


def _at_rest(server: http.Server, seconds: float = 3.0) -> float:
    """CPU seconds per second the server uses with no request coming in (waiters parked or not)."""
    before = process_cpu_seconds(server.pid)
    time.sleep(seconds)
    return round((process_cpu_seconds(server.pid) - before) / seconds, 3)


def _warm(server: http.Server, slug: str, tokens: list[str]) -> Any:
    return http._cycle_body(server, slug, [tokens[0]] * 4)


def _claims(server: http.Server, slug: str, tokens: list[str], seconds: float) -> Any:
    return run_threads(len(tokens), http._cycle_body(server, slug, tokens), duration=seconds)


def _wake_writer(project: Any, commits: dict[int, float], stop: threading.Event) -> None:
    from django.db import connections

    from ledger.actors import SYSTEM
    from ledger.models import EventType
    from ledger.services import event_append

    try:
        while not stop.wait(WAKE_EVERY_SECONDS):
            event = event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=datetime.now(UTC), project=project)
            commits[event.pk] = time.time()  # autocommit: committed on return
    finally:
        connections.close_all()


def _start_waiters(target: Target, server: http.Server, token: str, count: int, *, seconds: float) -> Any:
    command = [sys.executable, "-m", "bench", "waiters", "--port", str(server.port), "--count", str(count)]
    command += ["--seconds", str(seconds)]
    env = {**os.environ, **target.env, "PYTHONPATH": str(PROJECT_ROOT), "LEASEHOLD_BENCH_WAITER_TOKEN": token}
    return subprocess.Popen(
        command, env=env, cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _read_line(child: Any, kind: str) -> dict[str, Any]:
    line = child.stdout.readline()
    if not line:
        raise http.HttpError(f"the waiter process ended before its {kind} line (exit {child.poll()})")
    message = json.loads(line)
    if message.get("kind") != kind:
        raise http.HttpError(f"the waiter process said {message!r}, expected {kind}")
    return dict(message)


# --- the child: 500 long-poll waiters on asyncio streams ------------------------------------------


class _Waiters:
    def __init__(self) -> None:
        self.connected = 0
        self.responses = 0
        self.errors: list[str] = []
        self.arrivals: list[tuple[int, float]] = []


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *lines = head.split("\r\n")
    headers = {}
    for line in lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunks.append(await reader.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(chunk[:-2] for chunk in chunks)
    else:
        body = b""
    return int(status_line.split(" ", 2)[1]), headers, body


async def _one_waiter(port: int, token: str, since: int, stopping: asyncio.Event, state: _Waiters) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    state.connected += 1
    try:
        while not stopping.is_set():
            path = f"/api/v1/changes/?since={since}&wait={WAIT_SECONDS}&limit=100"
            request = (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                "Accept: application/json\r\n\r\n"
            )
            writer.write(request.encode())
            await writer.drain()
            read = asyncio.ensure_future(_read_response(reader))
            stop = asyncio.ensure_future(stopping.wait())
            done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
            if read not in done:
                read.cancel()
                return
            stop.cancel()
            status, headers, body = read.result()
            arrived = time.time()
            state.responses += 1
            if status != 200:
                state.errors.append(f"changes {status}: {body[:120]!r}")
                return
            answer = json.loads(body)
            state.arrivals.extend((event["id"], arrived) for event in answer["events"])
            since = answer["latest_event_id"]
            if headers.get("connection", "").lower() == "close":
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except (OSError, asyncio.IncompleteReadError) as exc:
        state.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()


async def _hold(port: int, token: str, count: int, seconds: float) -> _Waiters:
    state = _Waiters()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(seconds, stopping.set)

    def on_stdin() -> None:  # "stop", or the parent gone (EOF)
        sys.stdin.readline()
        stopping.set()

    loop.add_reader(sys.stdin.fileno(), on_stdin)
    # Everyone starts at the newest event: only what comes next wakes them.
    first = await _tail_position(port, token)
    tasks = []
    for start in range(0, count, CONNECT_BATCH):
        for _ in range(min(CONNECT_BATCH, count - start)):
            tasks.append(asyncio.ensure_future(_one_waiter(port, token, first, stopping, state)))
        await asyncio.sleep(0.05)
    while state.connected + len(state.errors) < count:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # the last requests reach their worker and park
    print(json.dumps({"kind": "ready", "connected": state.connected, "errors": state.errors[:3]}), flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return state


async def _tail_position(port: int, token: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /api/v1/changes/?tail=true HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        status, _, body = await _read_response(reader)
        if status != 200:
            raise RuntimeError(f"changes {status}: {body[:200]!r}")
        return int(json.loads(body)["latest_event_id"])
    finally:
        writer.close()


def waiters_main(port: int, count: int, seconds: float) -> None:
    """Child side: hold `count` waiters until stdin says stop (or `seconds`); one JSON line, then the result."""
    token = os.environ["LEASEHOLD_BENCH_WAITER_TOKEN"]
    state = asyncio.run(_hold(port, token, count, seconds))
    result = {
        "kind": "result",
        "connected": state.connected,
        "responses": state.responses,
        "errors": state.errors,
        "arrivals": state.arrivals,
    }
    print(json.dumps(result), flush=True)
