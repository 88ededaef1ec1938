"""The measuring parts of `--only runners` (bench/runners.py): a CPU meter over a window, and the raw SQL floor."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bench import http
from bench.environment import Target
from bench.proc_cpu import DatabaseCpu, process_cpu_seconds


class Meter:
    """The server's process tree and (PostgreSQL) its database's backends, over one window."""

    def __init__(self, target: Target, server: http.Server) -> None:
        self.target, self.server = target, server

    def __enter__(self) -> Meter:
        self.database = DatabaseCpu(self.target)
        self.database.start()
        self.began = time.monotonic()
        self.web_before = process_cpu_seconds(self.server.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.web = process_cpu_seconds(self.server.pid) - self.web_before
        self.elapsed = time.monotonic() - self.began
        self.db = float(self.database.stop().get("backends_s", 0.0))

    @property
    def total(self) -> float:
        return self.web + self.db


def raw_floor(target: Target, runner: Any, agent: Any, project: Any, repeats: int) -> dict[str, float]:
    """CPU seconds of one raw heartbeat and one raw empty claim-next (process + PostgreSQL backends)."""
    from bench import ops
    from bench.capture import capture, symbolize
    from bench.cycles import release_pool
    from bench.replay import RawConnection
    from core.errors import LedgerError
    from leases.services import lease_claim_next
    from ledger import clock
    from runners.services.heartbeats import SlotReport, runner_heartbeat

    reports = [SlotReport(number=n, state="idle") for n in range(1, runner.slots + 1)]

    def empty_claim() -> Any:
        try:
            return lease_claim_next(project=project, agent=agent)
        except LedgerError:
            return None

    operations = {"heartbeat": lambda: runner_heartbeat(runner=runner, slots=reports), "reask": empty_claim}
    adapt = ops.datetime_adapter()
    traces = {}
    for name, operation in operations.items():
        operation()  # warm
        moment = datetime.now(UTC)
        clock.freeze(moment)
        try:
            _, captured = capture(operation)
        finally:
            clock.unfreeze()
        symbols = {"now": adapt(moment), "runner_id": runner.pk, "agent_id": agent.pk, "project_id": project.pk}
        traces[name] = symbolize(f"runners-{name}", captured, symbols=symbols, results={})
    release_pool()
    spent: dict[str, float] = {}
    raw = RawConnection(target.vendor, target.dsn)
    try:
        for name, trace in traces.items():
            fresh = {"runner_id": runner.pk, "agent_id": agent.pk, "project_id": project.pk}
            raw.run(trace, {**fresh, "now": raw.adapt_datetime(datetime.now(UTC))})
            database = DatabaseCpu(target)
            database.start()
            began = time.process_time()
            for _ in range(repeats):
                outcome = raw.run(trace, {**fresh, "now": raw.adapt_datetime(datetime.now(UTC))})
                if outcome != "ok":
                    raise RuntimeError(f"the raw replay of {name} stopped: {outcome}")
            used = time.process_time() - began
            spent[name] = (used + float(database.stop().get("backends_s", 0.0))) / repeats
            spent[f"{name}_statements"] = float(len(trace.describe()))
    finally:
        raw.close()
    return spent
