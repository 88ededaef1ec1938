"""`python -m bench.pages`: server time of the console's pages on a large ledger (issue 15, docs/performance.md).

Seeds, through fast bulk inserts (COPY on PostgreSQL, executemany on SQLite; the
rollup triggers of `leases.0011_rollups` fire on them as on any insert),
`scale` times (10,000 tasks, 30,000 attempts, 100,000 events: one `task.created`
per task, the rest a mix) spread over 60 days,
with 40 agents, 4 projects, 200 live leases and some findings, then requests
each page in-process through Django's test client as a superuser (server
time: URL resolution, middleware, queries, template rendering; no network)
and reports the median and worst of `--repeat` requests, the number of
queries, and the slowest query with its plan (EXPLAIN).

    python -m bench.pages --database sqlite --scale 1
    python -m bench.pages --database postgres --scale 10 --json bench/results/pages-pg-10.json
    python -m bench.pages --database both --scales 1,4

`--scales 1,4` (issue 32) seeds and measures each scale on a fresh database in
its own process, then prints each page's median at both, their ratio (and the
ratio of the fastest requests) and whether it is within `--limit` (2x):
`bench/page_ratio.py`. The pages, and the runners, incidents, path
reservations and landing queue seeded for the later ones: `bench/page_list.py`.

Each database runs in its own process (Django reads its settings once).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.page_list import PAGES, seed_extras
from bench.page_ratio import LIMIT, compare, over, parse_scales, render, render_comparison

BASE = {"tasks": 10_000, "attempts": 30_000, "events": 100_000}
PROJECTS = 4
AGENTS = 40
LIVE = 200
DAYS = 60
EVENT_COLUMNS = ("project_id", "task_id", "attempt_id", "actor_agent_id", "type", "severity", "payload", "created_at")


def seed(scale: int, now: datetime, *, base: dict[str, int] = BASE, vacuum: bool = True) -> dict[str, Any]:
    """`scale` times `base` (the growth workload passes a smaller base for its tiny smoke scale, and
    `vacuum=False` when it adds rows of its own before vacuuming once: bench/growth_seed.py)."""
    from bench.data import ATTEMPT_COLUMNS, _copy_rows, bulk_ready_tasks, make_project, vacuum_analyze
    from ledger.models import Agent, EventType, Task
    from reconciliation.models import Condition, Finding, SubjectType

    # The mix of the seeded history beyond each task's `task.created`.
    event_mix = (
        (EventType.ATTEMPT_CLAIMED, "info"),
        (EventType.ATTEMPT_FINISHED, "info"),
        (EventType.NOTE_ADDED, "info"),
        (EventType.TASK_STATUS_CHANGED, "info"),
        (EventType.ATTEMPT_UPDATED, "info"),
        (EventType.ATTEMPT_EXPIRED, "info"),
        (EventType.TASK_QUEUE_WAIT_EXCEEDED, "warn"),
        (EventType.TASK_CONTESTED, "warn"),
    )

    tasks_n, attempts_n, events_n = (base[key] * scale for key in ("tasks", "attempts", "events"))
    fleets = [
        make_project(f"p{index}", agents=AGENTS // PROJECTS, agent_prefix=f"a{index}") for index in range(PROJECTS)
    ]
    for fleet in fleets:
        bulk_ready_tasks(fleet.project, tasks_n // PROJECTS, since=now - timedelta(days=DAYS))
    agents = list(Agent.objects.order_by("id").values_list("id", flat=True))
    task_rows = list(Task.objects.order_by("id").values_list("id", "project_id"))
    # Most of history is done; a slice stays ready, a few are blocked or open.
    done_ids = [task_id for index, (task_id, _) in enumerate(task_rows) if index % 10 < 7]
    for offset in range(0, len(done_ids), 5000):
        Task.objects.filter(pk__in=done_ids[offset : offset + 5000]).update(status="done")
    per_task = max(1, attempts_n // len(task_rows))
    statuses = ("completed", "failed", "expired", "released", "completed", "revoked")
    reasons = {"failed": "tests_failed"}
    steps = json.dumps([])
    live_tasks = {task_id for task_id, _ in task_rows[-LIVE * 3 :: 3]}

    def attempts() -> Iterator[tuple[Any, ...]]:
        for index, (task_id, _) in enumerate(task_rows):
            for epoch in range(1, per_task + 1):
                claimed = now - timedelta(seconds=(index * 7919 + epoch * 104729) % (DAYS * 86400))
                live = task_id in live_tasks and epoch == per_task
                status = "active" if live else statuses[(index + epoch) % len(statuses)]
                if live:
                    claimed = now - timedelta(minutes=5)
                expires = claimed + timedelta(seconds=900)
                finished = None if live else claimed + timedelta(seconds=600)
                yield (
                    task_id,
                    agents[(index + epoch) % len(agents)],
                    epoch,
                    status,
                    "0" * 64,
                    "0" * 32,
                    900,
                    expires,
                    claimed,
                    epoch,
                    finished,
                    f"feature/t{task_id}-{epoch}",
                    "",
                    f"task={task_id};epoch={epoch}",
                    1,
                    "Bench summary" if status == "completed" else "",
                    steps,
                    reasons.get(status, ""),
                    "",
                    "user:bench" if status == "revoked" else "",
                    "bench revoke" if status == "revoked" else "",
                )

    project_of = dict(task_rows)
    payloads = {
        EventType.TASK_QUEUE_WAIT_EXCEEDED: json.dumps({"ready_since": now.isoformat(), "waited_seconds": 7200}),
        EventType.TASK_CONTESTED: json.dumps(
            {"actor": "user:ops", "holder": "a0-000", "from": "ready", "to": "blocked"}
        ),
        EventType.TASK_STATUS_CHANGED: json.dumps({"from": "ready", "to": "done", "version": 2}),
    }

    created = now - timedelta(days=DAYS)
    created_payload = json.dumps({"status": "ready"})

    def events() -> Iterator[tuple[Any, ...]]:
        # Each task's `task.created` (ready): where the report's lead time starts (its first-ready rollup).
        for task_id, project_id in task_rows:
            yield (project_id, task_id, None, None, EventType.TASK_CREATED, "info", created_payload, created)
        mixed = events_n - len(task_rows)
        for index in range(mixed):
            task_id = task_rows[(index * 31) % len(task_rows)][0]
            kind, severity = event_mix[index % len(event_mix)]
            at = now - timedelta(seconds=(mixed - index) * (DAYS * 86400 / mixed))
            yield (
                project_of[task_id],
                task_id,
                None,
                agents[index % len(agents)] if severity == "info" else None,
                kind,
                severity,
                payloads.get(kind, "{}"),
                at,
            )

    # On PostgreSQL the event log is partitioned by month (ledger 0022): the seeded months get their partitions
    # first, as the daily job would have made them, instead of all landing in the default partition.
    from operations.event_partitions import ensure_partitions

    ensure_partitions(now=created, months_ahead=DAYS // 28 + 3)
    _copy_rows("ledger_event", EVENT_COLUMNS, events())
    # After the events: each task's first ready time is then known when its attempts are counted into the
    # report's rollup (before them, the first-ready trigger moves every completed attempt's count once more).
    _copy_rows("leases_attempt", ATTEMPT_COLUMNS, attempts())
    for index in range(60):
        project = fleets[index % PROJECTS].project
        condition = (Condition.ORPHAN_BRANCH, Condition.STALLED_ATTEMPT, Condition.LEAKED_ENVIRONMENT)[index % 3]
        Finding.objects.create(
            condition=condition,
            project=project,
            subject_type=SubjectType.BRANCH,
            subject_key=f"feature/orphan-{index}",
            first_seen_at=now - timedelta(hours=index),
            last_seen_at=now,
        )
    links = seed_extras(scale, now)
    # Fold the changes the triggers appended per seeded row, as the sweep job does every minute (unfolded,
    # the charts summed 285,000 changes at scale 4: an artefact of the seed, not of a ledger in service).
    from insight.services import rollups, task_counts

    task_counts.task_counts_fold()
    rollups.fleet_tally_fold()
    rollups.report_tally_fold()
    rollups.agent_day_tally_fold()
    if vacuum:
        vacuum_analyze()  # as autovacuum leaves a table: visibility map set, so index-only scans work
    sizes = {"tasks": len(task_rows), "attempts": per_task * len(task_rows), "events": events_n}
    return {**sizes, "links": links}


def explain(sql: str, params: Any) -> str:
    from django.db import connection

    prefix = (
        "EXPLAIN (ANALYZE, BUFFERS OFF, TIMING OFF) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    )
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        rows = cursor.fetchall()
    return "\n".join(" | ".join(str(cell) for cell in row) for row in rows)


def measure(repeat: int, links: dict[str, Any]) -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user = get_user_model().objects.create_superuser(username="bench", password="x" * 20)
    client = Client()
    client.force_login(user)
    results = []
    for name, pattern in PAGES:
        url = pattern.format(**links)
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        timings, cpu = [], []
        for _ in range(repeat):
            if "uncached" in url:
                cache.clear()
            started, cpu_started = time.perf_counter(), time.process_time()
            client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
            # This process's CPU (Django, and SQLite's engine, which runs in it; not PostgreSQL's backend):
            # less moved by other sessions' load than the wall time.
            cpu.append((time.process_time() - cpu_started) * 1000)
        if name in os.environ.get("LEASEHOLD_BENCH_PROFILE", "").split(","):
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(client.get, url)
            order = os.environ.get("LEASEHOLD_BENCH_PROFILE_SORT", "cumulative")
            pstats.Stats(profiler).sort_stats(order).print_stats(25)
        connection.force_debug_cursor = True
        if "uncached" in url:
            cache.clear()
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        queries = captured.captured_queries
        slowest = max(queries, key=lambda query: float(query["time"]), default=None)
        results.append(
            {
                "page": name,
                "url": url,
                "median_ms": round(statistics.median(timings), 1),
                "max_ms": round(max(timings), 1),
                "min_ms": round(min(timings), 1),
                "cpu_median_ms": round(statistics.median(cpu), 1),
                "queries": len(queries),
                "slowest_query_ms": round(float(slowest["time"]) * 1000, 1) if slowest else 0,
                "slowest_sql": slowest["sql"][:600] if slowest else "",
                "top_queries": [
                    {"ms": round(float(query["time"]) * 1000, 1), "sql": query["sql"][:300]}
                    for query in sorted(queries, key=lambda query: -float(query["time"]))[:5]
                ],
            }
        )
    return results


def plans() -> dict[str, str]:
    """The plans of the queries that read history or every task: the ones an index or a rollup must serve."""
    from django.db import connection

    from console.fleet.dashboard import QUEUE_WAIT_WINDOW
    from leases.models import Attempt
    from ledger import clock
    from ledger.models import Event, EventType

    now = clock.now()
    queries: dict[str, Any] = {
        "queue-wait alerts grouped (24 h)": Event.objects.filter(
            type=EventType.TASK_QUEUE_WAIT_EXCEEDED, created_at__gte=now - QUEUE_WAIT_WINDOW
        )
        .order_by()
        .values("type", "task_id")
        .annotate(n=__import__("django.db.models", fromlist=["Count"]).Count("id")),
        "events list page": Event.objects.order_by("-id")[:100],
        "agent 7-day counts": Attempt.objects.filter(finished_at__gte=now - timedelta(days=7))
        .order_by()
        .values("agent_id"),
    }

    from insight.metrics import fleet_tally_per_day

    month = now - timedelta(days=30)
    queries["fleet tally, claims per day (30 d)"] = fleet_tally_per_day("claims", first=month.date(), last=now.date())
    from leases.selectors import HOLDS_SET, claimable_tasks

    queries["dashboard: claimable count"] = (
        claimable_tasks(project=None, now=now, by_anyone=True, holds=HOLDS_SET).order_by().values("id")
    )
    found = {}
    # Raw statements: the report's rollup read and the dashboard's trigger-kept task counts.
    from insight.reports import TALLY_COLUMNS, TALLY_READ
    from insight.status_counts import TASK_COUNTS

    report_sql = TALLY_READ.format(columns=TALLY_COLUMNS, project="")
    found["report (30 d): the rollup"] = explain(report_sql, [month.date(), now.date()] * 2)
    found["dashboard: tasks by project and stored status (trigger-kept)"] = explain(TASK_COUNTS, [])
    for name, queryset in queries.items():
        sql, params = queryset.query.sql_with_params()
        found[name] = explain(sql, params)
    found["vendor"] = connection.vendor
    return found


def child(vendor: str, scale: int, repeat: int, out: Path) -> int:
    from bench.environment import configure_django, create_target, drop_target, migrate, new_workdir

    workdir = new_workdir()
    target = create_target(vendor, workdir=workdir, database_name=f"leasehold_bench_{os.getpid()}")
    target.env["LEASEHOLD_ALLOWED_HOSTS"] = "testserver,localhost"
    configure_django(target)
    try:
        migrate()
        from ledger import clock

        now = datetime.now(UTC).replace(microsecond=0)
        clock.freeze(now)
        started = time.perf_counter()
        sizes = seed(scale, now)
        links = sizes.pop("links")
        seeded = round(time.perf_counter() - started, 1)
        results = measure(repeat, links)
        payload = {"database": vendor, "scale": scale, "sizes": sizes, "seed_seconds": seeded, "pages": results}
        payload["plans"] = plans()
        out.write_text(json.dumps(payload, indent=2))
        print(render(payload), flush=True)
    finally:
        drop_target(target)
        if vendor == "sqlite":  # the database file (200 MB at scale 4) lives in the work folder
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pages", description=__doc__)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--scale", type=int, default=1, help="1 = 10k tasks / 30k attempts / 100k events")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--scales",
        type=parse_scales,
        default=None,
        metavar="SMALL,LARGE",
        help="measure at both scales (e.g. 1,4), each on a fresh database, and report each page's ratio",
    )
    parser.add_argument("--limit", type=float, default=LIMIT, help="the ratio a page must stay within (--scales)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child("postgresql" if args.database == "postgres" else "sqlite", args.scale, args.repeat, args.json)
    status = 0
    for database in ("sqlite", "postgres") if args.database == "both" else (args.database,):
        if args.scales:
            status |= scaled(database, args.scales, args.repeat, args.limit, args.json)
            continue
        out = args.json or Path("bench/results") / f"pages-{database}-x{args.scale}.json"
        status |= run_child(database, args.scale, args.repeat, out)
    return status


def run_child(database: str, scale: int, repeat: int, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "bench.pages", "--child", "--database", database]
    command += ["--scale", str(scale), "--repeat", str(repeat), "--json", str(out)]
    return subprocess.call(command)


def scaled(database: str, scales: tuple[int, int], repeat: int, limit: float, out: Path | None) -> int:
    """Both scales of one database, each in its own process and database, then the ratio per page."""
    results = Path("bench/results")
    payloads = []
    for scale in scales:
        path = results / f"pages-{database}-x{scale}.json"
        status = run_child(database, scale, repeat, path)
        if status:
            return status
        payloads.append(json.loads(path.read_text()))
    small, large = payloads
    rows = compare(small, large, limit=limit)
    print(render_comparison(small, large, rows, limit=limit), flush=True)
    target = out or results / f"pages-{database}-x{scales[0]}-vs-x{scales[1]}.json"
    if out is not None and database not in out.name:  # one file per database
        target = out.with_name(f"{out.stem}-{database}{out.suffix}")
    target.write_text(json.dumps({"database": database, "limit": limit, "over": over(rows), "pages": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
