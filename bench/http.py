"""The HTTP workloads: the full cycle through a production server (gunicorn), and the bytes of a page.

The server is `manage.py serve --no-cluster --workers N` on 127.0.0.1 and a
free port, against the same database; agents are created with
`manage.py create_agent`. Clients are threads using `http.client`, one
connection per request (gunicorn's sync workers close after each response).
"""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench import data, ops
from bench.environment import Target
from bench.harness import Recorder, RunResult, run_threads
from bench.processes import PROJECT_ROOT
from bench.replay import RawConnection
from bench.results import Row, row_from_run, set_ratio

UNAUTHENTICATED = "not-a-token"  # a 401 is enough to know the server answers
NOTE_BODY = {"kind": "checkpoint", "content": ops.NOTE_CONTENT, "next_steps": ops.NOTE_STEPS}


class HttpError(RuntimeError):
    pass


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    pid: int = 0  # `manage.py serve`'s, whose descendants are the gunicorn master and workers

    def call(
        self, method: str, path: str, *, token: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            payload = None if body is None else json.dumps(body).encode()
            all_headers = {"Authorization": f"Bearer {token}", "Accept": "application/json", **(headers or {})}
            if payload is not None:
                all_headers["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=all_headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(target: Target, *, workers: int, threads: int | None = None) -> Iterator[Server]:
    """`manage.py serve --no-cluster` on a free port until the block ends (`threads`: serve's default if None)."""
    port = free_port()
    env = {**os.environ, **target.env}
    shape = ["--workers", str(workers), *([] if threads is None else ["--threads", str(threads)])]
    # The server's stderr goes to a file, not a pipe nobody reads while it serves: every 4xx is a
    # Django warning line there, and a full pipe would stall the server mid-run.
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--no-cluster", *shape, "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
        server = Server("127.0.0.1", port, process.pid)
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    errors.seek(0)
                    tail = errors.read().decode(errors="replace")[-500:]
                    raise HttpError(f"the server exited {process.returncode}: {tail}")
                try:
                    status, _ = server.call("GET", "/api/v1/projects/", token=UNAUTHENTICATED)
                    if status in (200, 401, 403):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise HttpError("the server did not answer within 60 s")
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


def create_agents(project: Any, count: int, *, prefix: str) -> list[tuple[Any, str]]:
    """Agents made with `manage.py create_agent` (in this process); returns (agent, API token) pairs."""
    from django.core.management import call_command

    from ledger.models import Agent

    made = []
    for index in range(count):
        handle = f"{prefix}-{index:03d}"
        out = io.StringIO()
        call_command("create_agent", handle, "--kind", "claude", "--project", project.slug, stdout=out)
        token = out.getvalue().strip().splitlines()[-1]
        made.append((Agent.objects.get(handle=handle), token))
    return made


def _cycle_body(server: Server, slug: str, tokens: list[str]) -> Any:
    def body(index: int, recorder: Recorder, deadline: float) -> None:
        token = tokens[index]
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            status, raw = server.call("POST", "/api/v1/claims/next/", token=token, body={"project": slug})
            recorder.add("claim", time.perf_counter() - started)
            if status == 204:
                recorder.outcomes["nothing_claimable"] += 1
                return
            if status == 409 and b"TASK_TAKEN" in raw:
                recorder.outcomes["task_taken"] += 1
                continue
            if status != 201:
                recorder.errors.append(f"claim {status}: {raw[:160]!r}")
                continue
            grant = json.loads(raw)
            attempt = grant["attempt"]["id"]
            holder = {"X-Lease-Token": grant["lease_token"], "X-Lease-Epoch": str(grant["epoch"])}
            steps: tuple[tuple[str, str, dict[str, Any], int], ...] = (
                ("renew", f"/api/v1/attempts/{attempt}/renew/", {}, 200),
                ("note", f"/api/v1/attempts/{attempt}/notes/", NOTE_BODY, 201),
                ("finish", f"/api/v1/attempts/{attempt}/finish/", {"outcome": "done", "result_summary": "bench"}, 200),
            )
            for name, path, payload, expected in steps:
                status, raw = server.call("POST", path, token=token, body=payload, headers=holder)
                if status != expected:
                    recorder.errors.append(f"{name} {status}: {raw[:160]!r}")
                    break
            else:
                recorder.add("cycle", time.perf_counter() - started)

    return body


def http_workloads(
    target: Target, sizes: Any, *, workers: int, payload: dict[str, Any]
) -> tuple[list[Row], dict[str, Any]]:
    """W3 through HTTP at each level, then the bytes of a compact page and of a work context."""
    from bench.cycles import fresh_fleet, release_pool

    raw_rows = {
        row["concurrency"]: row
        for row in payload.get("rows", [])
        if row["workload"] == "W3 full cycle" and row["mode"] == "raw"
    }
    rows: list[Row] = []
    fleets = []
    for level in sizes.w3_levels:
        fleet = fresh_fleet("w3h", agents=0, tasks=sizes.w3_tasks)
        fleets.append((level, fleet, create_agents(fleet.project, level, prefix=f"{fleet.project.slug}-a")))
    warm_fleet = fresh_fleet("warm", agents=0, tasks=4 * workers)
    warm_agents = create_agents(warm_fleet.project, 1, prefix=f"{warm_fleet.project.slug}-a")
    page_fleet = fresh_fleet("page", agents=0, tasks=sizes.page_tasks, body_bytes=sizes.page_body_bytes)
    ((_, page_token),) = create_agents(page_fleet.project, 1, prefix=f"{page_fleet.project.slug}-a")
    data.analyze()
    release_pool()
    with serving(target, workers=workers) as server:
        # Warm every worker (imports, URL resolver, first queries) before measuring.
        run_threads(
            min(workers, 4),
            _cycle_body(server, warm_fleet.project.slug, [warm_agents[0][1]] * min(workers, 4)),
            duration=1.0 if sizes.w3_seconds < 2 else 3.0,
        )
        for level, fleet, agents in fleets:
            run = run_threads(
                level,
                _cycle_body(server, fleet.project.slug, [token for _, token in agents]),
                duration=sizes.w3_seconds,
            )
            row = row_from_run(target.vendor, "W3 full cycle", "http", run, kind="cycle", workers=workers)
            if level in raw_rows:
                reference = Row(**raw_rows[level])
                set_ratio(row, reference)
            rows.append(row)
        try:
            rows += _page_rows(target, server, page_fleet, page_token, sizes)
        except Exception as exc:  # reported as a failed row; the cycle rows above stand
            rows.append(
                Row(
                    database=target.vendor,
                    workload=f"bytes: page of {sizes.page_tasks}",
                    mode="http",
                    concurrency=1,
                    ops=0,
                    seconds=0.0,
                    throughput=None,
                    p50_ms=None,
                    p99_ms=None,
                    errors=[f"{type(exc).__name__}: {str(exc)[:300]}"],
                )
            )
    return rows, {}


def _page_rows(target: Target, server: Server, fleet: data.Fleet, token: str, sizes: Any) -> list[Row]:
    """GET a 100-task compact page: bytes over the wire and latency, against a raw replay of its statements."""
    from django.test import Client

    from bench.capture import capture, symbolize
    from ledger import clock

    path = f"/api/v1/tasks/?project={fleet.project.slug}&limit={sizes.page_tasks}"
    samples: list[float] = []
    size = 0
    for _ in range(sizes.page_calls):
        started = time.perf_counter()
        status, body = server.call("GET", path, token=token)
        samples.append(time.perf_counter() - started)
        if status != 200:
            raise HttpError(f"page {status}: {body[:200]!r}")
        size = len(body)
        listed = len(json.loads(body)["results"])
    # The statements the view runs, captured in-process with the clock held still for one call.
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    client.get(path)
    moment = datetime.now(UTC)
    clock.freeze(moment)
    try:
        _, trace = capture(lambda: client.get(path))
    finally:
        clock.unfreeze()
    adapt = ops.datetime_adapter()
    from ledger.models import Agent
    from ledger.tokens import hash_token

    agent = Agent.objects.get(token_hash=hash_token(token))
    symbols = {"project_id": fleet.project.pk, "agent_id": agent.pk, "now": adapt(moment), "slug": fleet.project.slug}
    replay = symbolize("task_page", trace, symbols=symbols, results={})
    raw = RawConnection(target.vendor, target.dsn)
    raw_samples = []
    try:
        for _ in range(sizes.page_calls):
            started = time.perf_counter()
            raw.run(replay, {**symbols, "now": raw.adapt_datetime(datetime.now(UTC))})
            raw_samples.append(time.perf_counter() - started)
        if target.vendor == "postgresql":
            raw.conn.rollback()
    finally:
        raw.close()
    name = f"bytes: page of {sizes.page_tasks}, {sizes.page_body_bytes // 1000} KB bodies"
    http_run = RunResult(threads=1, seconds=sum(samples), latencies={"call": samples}, outcomes=Counter(), errors=[])
    raw_run = RunResult(
        threads=1, seconds=sum(raw_samples), latencies={"call": raw_samples}, outcomes=Counter(), errors=[]
    )
    http_row = row_from_run(
        target.vendor,
        name,
        "http",
        http_run,
        kind="call",
        bytes=size,
        tasks=listed,
        bodies_bytes=2 * sizes.page_body_bytes * sizes.page_tasks,
    )
    raw_row = row_from_run(target.vendor, name, "raw", raw_run, kind="call", statements=len(replay.describe()))
    set_ratio(http_row, raw_row)
    return [http_row, raw_row]
