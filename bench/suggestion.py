"""`python -m bench.suggestion`: a claim without `lease_seconds` as history grows (issue 33, SPEC §25).

One database per child process, grown in steps (default 10,000 then 1,000,000
attempts of history) in the same run, so each row's ratio to its first step is
measured on one machine at one moment. History is bulk rows (COPY on
PostgreSQL, executemany on SQLite; the schema's triggers fire on them, the
lease samples' included): a project `history` whose tasks, of the class
`common`, have three attempts each (one completed, one released, one
expired), and the case of the issue, a project `suggest` holding 1 % as many
tasks of the same class, ready, of which 25 were completed, before all of
`history`'s. Fewer than the window of 1,000 in the project: the old read
(the planner expecting 1 % of the completions to be the project's) walked
every completed attempt in the database, newest first, looking for more.

At each step, per row, `--repeat` calls (median, and the range min-max):

- claim, no `lease_seconds`: `lease_claim` of a ready task of `suggest` (then
  released, untimed), through the service: the operation of the issue;
- claim, `lease_seconds=900`: the same claim without the suggestion (its
  yardstick: the difference is the suggestion's share);
- suggestion (ORM): `suggested_lease_seconds` alone;
- suggestion, raw SQL: the same statement through the connection's cursor
  (no ORM): the raw reference of the row above;
- old walk, raw SQL: the statement the samples replaced (over the attempts),
  fewer calls (`--old-repeat`): what the suggestion cost before.

    python -m bench.suggestion --database postgres --steps 10000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

RARE_COMPLETIONS = 25
CLASS = "common"
SMALL_SHARE = 100  # the `suggest` project has 1/SMALL_SHARE of `history`'s tasks
ATTEMPTS_PER_TASK = 3  # bench.data.bulk_history: released, expired, completed


def seed_rare(fleet: Any, now: datetime) -> None:
    """RARE_COMPLETIONS completed attempts in `fleet`'s project, ten days ago: older than all of `history`'s."""
    from bench.data import ATTEMPT_COLUMNS, _copy_rows, bulk_ready_tasks

    first, last = bulk_ready_tasks(fleet.project, RARE_COMPLETIONS, task_class=CLASS, since=now)
    agent = fleet.agents[0]

    def rows() -> Iterator[tuple[Any, ...]]:
        for index, task_id in enumerate(range(first, last + 1)):
            claimed = now - timedelta(days=10, minutes=index)
            yield (
                task_id, agent.pk, 1, "completed", "0" * 64, "0" * 32, 3600, claimed + timedelta(hours=1),
                claimed, 0, claimed + timedelta(seconds=100 + 10 * index), "", "", f"rare-{index}", 1, "", "[]",
                "", "", "", "",
            )  # fmt: skip

    _copy_rows("leases_attempt", ATTEMPT_COLUMNS, rows())
    from ledger.models import Task

    Task.objects.filter(pk__gte=first, pk__lte=last).update(epoch=1, status="done")


def grow(fleet: Any, small: Any, attempts: int, now: datetime) -> None:
    """`attempts` more attempts of history (a third of them completed); 1 % as many ready tasks in `small`."""
    from bench.data import bulk_history, bulk_ready_tasks

    tasks = attempts // ATTEMPTS_PER_TASK
    bulk_ready_tasks(small.project, tasks // SMALL_SHARE, task_class=CLASS, since=now)
    first, last = bulk_ready_tasks(fleet.project, tasks, task_class=CLASS, since=now)
    bulk_history(
        fleet.project,
        fleet.agents[0],
        first_task=first,
        last_task=last,
        finished_per_task=ATTEMPTS_PER_TASK,
        lapsed=False,
        now=now,
    )


def timed(call: Callable[[], Any], repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return {
        "median_ms": round(statistics.median(times), 3),
        "min_ms": round(min(times), 3),
        "max_ms": round(max(times), 3),
    }


def measure(fleet: Any, *, repeat: int, old_repeat: int) -> dict[str, dict[str, float]]:
    from django.db import connection

    from bench.data import bulk_ready_tasks
    from leases.models import Attempt, AttemptStatus
    from leases.selectors import suggested_lease_seconds
    from leases.selectors.attempts import LEASE_SIZING_SAMPLE_LIMIT, lease_sizing_window
    from leases.services import HolderProof, attempt_release, lease_claim
    from ledger import clock
    from ledger.models import Task

    project, agent = fleet.project, fleet.agents[1]
    first, last = bulk_ready_tasks(project, 2 * repeat, task_class=CLASS, since=clock.now())
    ready = iter(Task.objects.filter(pk__gte=first, pk__lte=last).order_by("id"))
    suggested = suggested_lease_seconds(project=project, task_class=CLASS)
    assert suggested == 3 * (100 + 10 * 23), suggested  # nearest-rank p95 of 25: the 24th

    def claim(lease_seconds: int | None) -> Callable[[], Any]:
        def run() -> None:
            grant = lease_claim(task=next(ready), agent=agent, lease_seconds=lease_seconds)
            assert lease_seconds is not None or grant.attempt.lease_seconds == suggested
            proof = HolderProof(attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=agent)
            pending.append(proof)

        return run

    pending: list[Any] = []

    def released(call: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> None:
            call()
            attempt_release(proof=pending.pop())

        return run

    def raw(queryset: Any) -> Callable[[], Any]:
        sql, params = queryset.query.sql_with_params()

        def run() -> None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                cursor.fetchall()

        return run

    old_walk = (
        Attempt.objects.filter(status=AttemptStatus.COMPLETED, task__project=project, task__task_class=CLASS)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:LEASE_SIZING_SAMPLE_LIMIT]
    )
    # The release is timed with the claim in both claim rows alike; the difference is the suggestion.
    rows = {
        "claim + release, no lease_seconds": timed(released(claim(None)), repeat),
        "claim + release, lease_seconds=900": timed(released(claim(900)), repeat),
        "suggestion (ORM)": timed(lambda: suggested_lease_seconds(project=project, task_class=CLASS), repeat),
        "suggestion, raw SQL": timed(raw(lease_sizing_window(project=project, task_class=CLASS)), repeat),
        "old walk over attempts, raw SQL": timed(raw(old_walk), old_repeat),
    }
    return rows


def plans(fleet: Any) -> dict[str, str]:
    """The plans of the new read and of the old walk (PostgreSQL: EXPLAIN ANALYZE with buffers)."""
    from django.db import connection

    from leases.models import Attempt, AttemptStatus
    from leases.selectors.attempts import LEASE_SIZING_SAMPLE_LIMIT, lease_sizing_window

    old_walk = (
        Attempt.objects.filter(status=AttemptStatus.COMPLETED, task__project=fleet.project, task__task_class=CLASS)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:LEASE_SIZING_SAMPLE_LIMIT]
    )
    explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    found = {}
    for name, queryset in (("new", lease_sizing_window(project=fleet.project, task_class=CLASS)), ("old", old_walk)):
        sql, params = queryset.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(explain + sql, params)
            found[name] = "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())
    return found


def storage() -> dict[str, Any]:
    from django.db import connection

    from leases.models import LeaseSample

    samples = LeaseSample.objects.count()
    if connection.vendor != "postgresql":
        return {"samples": samples}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('leases_leasesample'), pg_total_relation_size('leases_attempt')")
        sample_bytes, attempt_bytes = cursor.fetchone()
    return {
        "samples": samples,
        "sample_bytes_per_row": round(sample_bytes / max(samples, 1)),
        "attempt_table_bytes": attempt_bytes,
    }


def child(vendor: str, steps: list[int], repeat: int, old_repeat: int, out: Path) -> int:
    from bench.environment import configure_django, create_target, drop_target, migrate, new_workdir

    workdir = new_workdir()
    target = create_target(vendor, workdir=workdir, database_name=f"leasehold_bench_{os.getpid()}")
    configure_django(target)
    try:
        migrate()
        from bench.data import make_project, vacuum_analyze

        now = datetime.now(UTC).replace(microsecond=0)
        history = make_project("history", agents=1)
        fleet = make_project("suggest", agents=2)
        seed_rare(fleet, now)
        results: list[dict[str, Any]] = []
        have = 0
        for step in steps:
            began = time.perf_counter()
            grow(history, fleet, step - have, now)
            have = step
            vacuum_analyze()
            seeded = round(time.perf_counter() - began, 1)
            results.append(
                {"attempts": step, "seed_seconds": seeded, "rows": measure(fleet, repeat=repeat, old_repeat=old_repeat)}
            )
            results[-1].update(storage())
            results[-1]["plans"] = plans(fleet)
            print(render({"database": vendor, "steps": results}), flush=True)
            print(results[-1]["plans"]["new"], "\n--- old:\n", results[-1]["plans"]["old"], flush=True)
        payload = {"database": vendor, "steps": results}
        out.write_text(json.dumps(payload, indent=2))
    finally:
        drop_target(target)
    return 0


def render(payload: dict[str, Any]) -> str:
    steps = payload["steps"]
    head = " | ".join(f"{step['attempts']:,} attempts" for step in steps)
    lines = [f"### {payload['database']}", "", f"| ms, median (min-max) | {head} | ratio last/first |"]
    lines.append("| --- |" + " ---: |" * (len(steps) + 1))
    for name in steps[0]["rows"]:
        cells = [
            f"{s['rows'][name]['median_ms']:,.2f} ({s['rows'][name]['min_ms']:,.2f}-{s['rows'][name]['max_ms']:,.2f})"
            for s in steps
        ]
        ratio = steps[-1]["rows"][name]["median_ms"] / steps[0]["rows"][name]["median_ms"]
        lines.append(f"| {name} | {' | '.join(cells)} | {ratio:,.2f} |")
    last = steps[-1]["rows"]
    lines.append("")
    lines.append(
        f"suggestion ORM / raw SQL at the last step: "
        f"{last['suggestion (ORM)']['median_ms'] / last['suggestion, raw SQL']['median_ms']:.2f}; "
        f"claim without / with lease_seconds: {last['claim + release, no lease_seconds']['median_ms'] / last['claim + release, lease_seconds=900']['median_ms']:.2f}; "  # noqa: E501
        f"seeded: {', '.join(str(s['seed_seconds']) + ' s' for s in steps)}; storage: {[{k: v for k, v in s.items() if k not in ('rows', 'plans')} for s in steps]}"  # noqa: E501
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suggestion", description=__doc__)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--steps", default="10000,1000000", help="attempts of history at each step")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--old-repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    steps = [int(step) for step in args.steps.split(",")]
    if args.child:
        vendor = "postgresql" if args.database == "postgres" else "sqlite"
        return child(vendor, steps, args.repeat, args.old_repeat, args.json)
    status = 0
    for database in ("sqlite", "postgres") if args.database == "both" else (args.database,):
        out = args.json or Path("bench/results") / f"suggestion-{database}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "bench.suggestion", "--child", "--database", database, "--steps", args.steps]
        command += ["--repeat", str(args.repeat), "--old-repeat", str(args.old_repeat), "--json", str(out)]
        status |= subprocess.call(command)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
