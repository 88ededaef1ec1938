"""The growth workload's measurements at one scale (issue 33): what `bench.growth` runs in each child.

Every row is a list of timed calls of one operation (wall time, `time.perf_counter()`), with the CPU the
bench process spent in them (`time.process_time()`: the service layer, and SQLite's engine, which runs in
the process) and, on PostgreSQL, the CPU of the database's backends over the same calls
(`/proc/<pid>/schedstat`, summed over every backend of the bench's database, found by
`bench.proc_cpu.backends`; a row's per-call figure is the mean over its calls).

- **agent**: `repeat` agent cycles through the services (`bench.ops`): claim-next, the work context
  (`GET /api/v1/tasks/<key>/context/`, in-process through Django's test client: server time), renew,
  a progress note, a checkpoint, finish (done); then claims of named tasks with and without
  `lease_seconds` (each released, untimed). Beside them, the raw replay of the claim-next, renew,
  checkpoint and finish statements captured in this run (`bench.replay`), on the same project.
- **read**: search (`GET /api/v1/search/`, three of `bench.search`'s queries) against its raw
  statements (`bench.search._raw`); the changes feed (`GET /api/v1/changes/`, the newest 100 and the
  first 100); `/metrics` (the first scrape of the process, then warm).
- **job**: each scheduled job's wrapper (the sweep, with its folds; the queue-wait check;
  reconciliation; the incident check; the idempotency purge) and the rollup folds alone.
- **page**: the console pages (`bench.pages.measure`: wall time, the median of `repeat` requests),
  and one row for the CPU of all of them together.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import ops

SEARCHES = {"a ticket (rare word)": "ticket-4242", "two words": "flakyless deployous", "one common word": "migration"}


class Meter:
    """Samples per operation: wall seconds, process CPU seconds and (PostgreSQL) backend CPU seconds."""

    def __init__(self, database: str | None) -> None:
        self.database = database  # the PostgreSQL database's name; None on SQLite
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, float] = {}
        self.db: dict[str, float] = {}
        self.group: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.timeouts: dict[str, int] = {}

    def _db_seconds(self) -> float:
        """CPU seconds so far of the database's backends, from `/proc/<pid>/schedstat` (nanoseconds: a
        short call's share is not lost to the clock ticks of `/proc/<pid>/stat`)."""
        from bench.proc_cpu import backends

        if not self.database:
            return 0.0
        total = 0.0
        for pid, ticks in backends(self.database).items():
            try:
                with open(f"/proc/{pid}/schedstat") as schedstat:
                    total += int(schedstat.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                total += ticks  # ended meanwhile, or no schedstat: the ticks read a moment ago
        return total

    def run(self, group: str, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`call(*args, **kwargs)`, timed as one sample of `name`; returns what it returned."""
        db_before = self._db_seconds()
        cpu_before, began = time.process_time(), time.perf_counter()
        result = call(*args, **kwargs)
        self.wall.setdefault(name, []).append(time.perf_counter() - began)
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu_before
        self.db[name] = self.db.get(name, 0.0) + self._db_seconds() - db_before
        self.group[name] = group
        return result

    def timed_out(self, group: str, name: str, seconds: float) -> None:
        """A sample of `name` that ended at its statement timeout: recorded as the timeout (a lower
        bound of its time), and the row says so."""
        self.wall.setdefault(name, []).append(seconds)
        self.cpu.setdefault(name, 0.0)
        self.db.setdefault(name, 0.0)
        self.group[name] = group
        self.timeouts[name] = self.timeouts.get(name, 0) + 1
        stopped = self.timeouts[name]
        self.notes[name] = f"{stopped} sample(s) stopped at the statement timeout ({seconds:g} s): a lower bound"

    def rows(self, references: dict[str, str]) -> list[dict[str, Any]]:
        rows = []
        for name, samples in self.wall.items():
            count = len(samples)
            row: dict[str, Any] = {
                "group": self.group[name],
                "name": name,
                "n": count,
                "median_ms": round(statistics.median(samples) * 1000, 3),
                "min_ms": round(min(samples) * 1000, 3),
                "max_ms": round(max(samples) * 1000, 3),
                "cpu_ms": round(self.cpu[name] / count * 1000, 3),
                "db_cpu_ms": round(self.db[name] / count * 1000, 3) if self.database else None,
            }
            if name in self.notes:
                row["note"] = self.notes[name]
            reference = references.get(name)
            if reference in self.wall:
                raw = statistics.median(self.wall[reference]) * 1000
                row["raw_ms"] = round(raw, 3)
                row["vs_raw"] = round(row["median_ms"] / raw, 2) if raw else None
            rows.append(row)
        return rows


# Service row -> the raw row it is compared with, in the same run.
REFERENCES = {
    "claim-next": "raw: claim-next",
    "renew": "raw: renew",
    "checkpoint": "raw: checkpoint",
    "finish (done)": "raw: finish (done)",
    **{f"search: {name}": f"raw: search: {name}" for name in SEARCHES},
}
RAW_NAMES = {"claim_next": "raw: claim-next", "renew": "raw: renew", "note": "raw: checkpoint"}


def agent_cycles(meter: Meter, setup: dict[str, Any], client: Any, repeat: int) -> None:
    from leases.services import lease_claim, note_add

    holder = ops.Holder(agent=setup["agent"], project=setup["project"])
    for _ in range(repeat):
        grant = meter.run("agent", "claim-next", ops.CLAIM_NEXT.call, holder)
        if grant is None:
            raise RuntimeError("claim-next found nothing: the growth workload ran out of ready tasks")
        url = f"/api/v1/tasks/{grant.task.key}/context/"
        response = meter.run("agent", "work context (HTTP)", client.get, url)
        if response.status_code != 200:
            raise RuntimeError(f"work context answered {response.status_code}")
        meter.run("agent", "renew", ops.RENEW.call, holder)
        meter.run("agent", "note (progress)", note_add, proof=holder.proof, kind="progress", content=ops.NOTE_CONTENT)
        meter.run("agent", "checkpoint", ops.NOTE.call, holder)
        meter.run("agent", "finish (done)", ops.FINISH_DONE.call, holder)
    for lease_seconds, name in ((900, "claim a task, lease_seconds=900"), (None, "claim a task, no lease_seconds")):
        for task in _ready_tasks(setup["project"], repeat):
            holder.grant = meter.run(
                "agent", name, lease_claim, task=task, agent=holder.agent, lease_seconds=lease_seconds
            )
            _release(holder)


def _ready_tasks(project: Any, count: int) -> list[Any]:
    """The newest ready, unheld tasks of the project (claim-next takes the oldest)."""
    from ledger.models import Task

    return list(Task.objects.filter(project=project, status="ready", held=False).order_by("-id")[:count])


def _release(holder: ops.Holder) -> None:
    from leases.services import attempt_release

    attempt_release(proof=holder.proof)


def raw_cycles(meter: Meter, setup: dict[str, Any], target: Any, repeat: int) -> None:
    """The captured statements of claim-next, renew, checkpoint and finish, replayed on a plain connection.

    The capture is of a task without history (`bench.cycles.capture_ops`), so the replay runs on fresh
    tasks of a project of its own, in the same database (as W3's does): a seeded task's history changes
    the statements (its last attempt's state is read, its epoch is not 0)."""
    from django.db import reset_queries

    from bench.cycles import capture_ops, fresh_fleet
    from bench.replay import RawConnection

    reset_queries()  # a full query log (an earlier run's pages) would hide statements from the capture
    captured = capture_ops("growth", [ops.CLAIM_NEXT, ops.RENEW, ops.NOTE, ops.FINISH_DONE])
    fleet = fresh_fleet("growth-raw", agents=1, tasks=repeat + 5)
    raw = RawConnection(target.vendor, target.dsn)
    try:
        agent = ops.raw_agent(raw, agent=fleet.agents[0], project=fleet.project)
        for _ in range(repeat):
            for op in captured:
                name = RAW_NAMES.get(op.spec.name, "raw: finish (done)")
                outcome = meter.run("agent", name, ops.raw_op, agent, op)
                if outcome != "ok":
                    raise RuntimeError(f"the raw replay of {op.spec.name} stopped: {outcome}")
    finally:
        raw.close()


def reads(meter: Meter, setup: dict[str, Any], client: Any, staff: Any, repeat: int) -> None:
    from django.db import connection

    from bench.search import RAW_TIMEOUT_MS, _raw
    from ledger.models import Event

    for name, query in SEARCHES.items():
        for _ in range(repeat):
            response = meter.run("read", f"search: {name}", client.get, "/api/v1/search/", {"q": query})
            meter.notes[f"search: {name}"] = f"HTTP {response.status_code}"
            try:
                meter.run("read", f"raw: search: {name}", _raw, connection.vendor, query, setup["project"].pk, 0)
            except Exception as exc:  # the raw reference's own cap (bench.search.RAW_TIMEOUT_MS): a row, noted
                if "statement timeout" not in str(exc):
                    raise
                meter.timed_out("read", f"raw: search: {name}", RAW_TIMEOUT_MS / 1000)
    newest = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    for name, since in (("changes feed: the newest 100", max(0, newest - 100)), ("changes feed: from 0", 0)):
        for _ in range(repeat):
            response = meter.run("read", name, client.get, "/api/v1/changes/", {"since": since})
            if response.status_code != 200:
                raise RuntimeError(f"{name} answered {response.status_code}")
    for _ in range(repeat):
        meter.run("read", "/metrics (warm)", staff.get, "/metrics")


def first_scrape(meter: Meter, staff: Any) -> None:
    response = meter.run("read", "/metrics (first scrape)", staff.get, "/metrics")
    if response.status_code != 200:
        raise RuntimeError(f"/metrics answered {response.status_code}")


def landed_outside_check(meter: Meter, repeat: int) -> None:
    """Reconcile's landed-outside check (SPEC §21.2, `reconciliation.landed`) against a real target.

    The seed's landing project has no repository, so in `job: reconcile` the check stops at git's error
    (as a project whose target cannot be read does). Giving the project one would also start
    reconcile's git conditions and its first full scan of the project's 30 days of ended attempts
    (bounded in memory, not in time: "Reconcile incremental"). So the check runs here on its own,
    with the project's repository read as a fresh local repository whose `main` holds none of the
    seed's heads: the first run reads every delivered task (one `git cat-file` sets their heads
    aside), the next ones only what changed since the cursor.
    """
    import subprocess
    import tempfile
    from dataclasses import replace

    from ledger import clock
    from reconciliation.landed import landed_outside, landing_projects, save_target_cursors
    from reconciliation.models import TargetCursor

    path = tempfile.mkdtemp(prefix="growth-target-")
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", path], check=True)
    subprocess.run(["git", "-C", path, *identity, "commit", "-q", "--allow-empty", "-m", "target"], check=True)
    projects = [replace(project, repository=path, remote="") for project in landing_projects()]
    TargetCursor.objects.filter(project_id__in=[project.id for project in projects]).delete()

    def check() -> int:
        found = landed_outside(projects)
        if found.errors:
            raise RuntimeError(f"the landed-outside check could not read its target: {found.errors}")
        save_target_cursors(found, now=clock.now())
        return len(found.landed)

    meter.run("job", "job: landed-outside check, a target's first run (every delivered task)", check)
    for _ in range(repeat):
        meter.run("job", "job: landed-outside check, with its cursor", check)


def jobs(meter: Meter, repeat: int) -> None:
    from insight.jobs import check_incidents_job
    from insight.services import rollups, task_counts
    from leases.jobs import check_queue_wait_job, purge_idempotency_job, sweep_expired_job
    from reconciliation.jobs import reconcile_job

    def folds() -> tuple[int, int]:
        return task_counts.task_counts_fold(), rollups.fleet_tally_fold()

    every = {
        "job: rollup folds": folds,
        "job: sweep (and its folds)": sweep_expired_job,
        "job: queue-wait check": check_queue_wait_job,
        "job: reconcile": reconcile_job,
        "job: incident check": check_incidents_job,
        "job: idempotency purge": purge_idempotency_job,
    }
    for _ in range(repeat):
        for name, job in every.items():
            meter.run("job", name, job)


def clients(token: str) -> tuple[Any, Any]:
    """An agent's API client (its bearer token) and a superuser's session client."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    agent = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    staff = Client()
    # A kept database measured again (`--reuse`) has the superuser of the earlier measurement.
    user = get_user_model().objects.filter(username="growth").first()
    staff.force_login(user or get_user_model().objects.create_superuser(username="growth", password="x" * 20))
    return agent, staff


def pages(meter: Meter, links: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    """The console pages through `bench.pages.measure`; one row of their CPU together."""
    from django.contrib.auth import get_user_model

    from bench import pages as console

    get_user_model().objects.filter(username="bench").delete()  # measure() makes its own user, per run
    measured = meter.run("page", "console pages, all (CPU per page request)", console.measure, repeat, links)
    requests = len(measured) * (repeat + 1)
    name = "console pages, all (CPU per page request)"
    meter.cpu[name] /= requests
    meter.db[name] /= requests
    meter.notes[name] = f"{len(measured)} pages x {repeat + 1} requests; wall is the whole batch"
    return [
        {
            "group": "page",
            "name": f"page: {row['page']}",
            "n": repeat,
            "median_ms": row["median_ms"],
            "min_ms": row["min_ms"],
            "max_ms": row["max_ms"],
            "queries": row["queries"],
            "slowest_query_ms": row["slowest_query_ms"],
        }
        for row in measured
    ]
