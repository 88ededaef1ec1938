"""A focused probe of the growth workload's jobs and feeds (issue 33, round two).

    python -m bench.jobs_growth seed --database postgres --tasks 100000 --name 100k
    python -m bench.jobs_growth measure --database postgres --name 100k --repeat 5
    python -m bench.jobs_growth measure --database postgres --name 100k --explain

`seed` writes `bench.growth_seed`'s ledger (the same as `python -m bench growth`'s, 3 attempts, 3
notes, 1 allocation and 10 events per task) once into a **template**: a PostgreSQL database
`jobs39_tpl_<name>`, or a SQLite file under `$TMPDIR/jobs39/tpl-<name>/`. `measure` clones the template
(`CREATE DATABASE … TEMPLATE`, or a file copy), migrates the clone (so a migration of the branch under
test is applied to the same history) and measures, in a fresh process, the rows of
`bench.growth_measure` this probe is about: `/metrics`' first scrape (the process's first request),
the changes feed (from 0, and the newest 100), `/metrics` warm, the rollup folds, and each job's wrapper
(sweep, queue-wait check, incident check, reconcile), `--repeat` calls each, with the bench process's
and (PostgreSQL) the backends' CPU per call (`bench.growth_measure.Meter`), and the statements each
ran. `--explain` prints, per job, the plan (`EXPLAIN (ANALYZE, BUFFERS)` on PostgreSQL, `EXPLAIN
QUERY PLAN` on SQLite) of each of its reads after one warm call. `drop` removes the templates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PREFIX = "jobs39_"
ROOT = Path(tempfile.gettempdir()) / "jobs39"


def _pg_url(name: str) -> str:
    from bench.environment import pg_admin_url

    return pg_admin_url().rsplit("/", 1)[0] + "/" + name


def _target(vendor: str, name: str, *, fresh: bool) -> Any:
    """The environment of database `name` (created empty when `fresh`)."""
    from bench.environment import Target, create_target

    workdir = ROOT / name
    workdir.mkdir(parents=True, exist_ok=True)
    if fresh:
        return create_target(vendor, workdir=workdir, database_name=PREFIX + name)
    env = create_target("sqlite", workdir=ROOT / "scratch").env if vendor == "postgresql" else None
    if vendor == "postgresql":
        assert env is not None
        env["DATABASE_URL"] = _pg_url(PREFIX + name)
        return Target(vendor=vendor, env=env, dsn=env["DATABASE_URL"])
    env = create_target("sqlite", workdir=ROOT / "scratch").env
    env["LEASEHOLD_DATA_DIR"] = str(workdir)
    return Target(vendor=vendor, env=env, dsn=str(workdir / "leasehold.sqlite3"))


def _clone(vendor: str, template: str, clone: str) -> None:
    if vendor == "postgresql":
        import psycopg

        from bench.environment import pg_admin_url

        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{PREFIX}{clone}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{PREFIX}{clone}" TEMPLATE "{PREFIX}{template}"')
        return
    (ROOT / clone).mkdir(parents=True, exist_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{ROOT / clone / 'leasehold.sqlite3'}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(ROOT / template / "leasehold.sqlite3", ROOT / clone / "leasehold.sqlite3")


def seed(args: argparse.Namespace) -> int:
    from bench.environment import configure_django, migrate

    target = _target(args.vendor, f"tpl-{args.name}".replace("-", "_"), fresh=True)
    target.env["LEASEHOLD_ALLOWED_HOSTS"] = "testserver,localhost"
    configure_django(target)
    migrate()
    from bench import data, growth_seed
    from ledger import clock

    data.offset_ids()
    now = datetime.now(UTC).replace(microsecond=0)
    began = time.perf_counter()
    clock.freeze(now)
    try:
        setup = growth_seed.seed(args.tasks, now, extra=200)
    finally:
        clock.unfreeze()
    info = {"tasks": args.tasks, "seeded_at": now.isoformat(), "seconds": round(time.perf_counter() - began, 1)}
    info.update(project=setup["project"].pk, agent=setup["agent"].pk, token=setup["token"], sizes=setup["sizes"])
    (ROOT / f"tpl-{args.vendor}-{args.name}.json").write_text(json.dumps(info, default=str))
    print(json.dumps(info, default=str))
    return 0


def measure(args: argparse.Namespace) -> int:
    from bench.environment import configure_django, migrate

    template, clone = f"tpl_{args.name}", f"run_{args.vendor[:2]}_{args.name}_{os.getpid()}"
    _clone(args.vendor, template, clone)
    target = _target(args.vendor, clone, fresh=False)
    target.env["LEASEHOLD_ALLOWED_HOSTS"] = "testserver,localhost"
    configure_django(target)
    info = json.loads((ROOT / f"tpl-{args.vendor}-{args.name}.json").read_text())
    started = time.perf_counter()
    migrate()
    migrated = round(time.perf_counter() - started, 1)
    from bench import growth_measure

    database = target.dsn.rsplit("/", 1)[1] if target.is_postgres else None
    meter = growth_measure.Meter(database)
    load = [os.getloadavg()[0]]
    agent_client, staff = growth_measure.clients(info["token"])
    growth_measure.first_scrape(meter, staff)
    queries: dict[str, list[int]] = {}
    for _ in range(args.repeat):
        _reads(meter, agent_client, staff)
        for name, job in _jobs().items():
            queries.setdefault(name, []).append(_counted(meter, name, job))
    # The steady state of the queue-wait check: every waiting task alerted for its period (the runs above
    # alert the seed's backlog, QUEUE_WAIT_ALERTS_PER_RUN a run, as the job does after an outage).
    _alert_backlog()
    for _ in range(args.repeat):
        queries.setdefault(STEADY, []).append(_counted(meter, STEADY, _jobs()["job: queue-wait check"]))
    load.append(os.getloadavg()[0])
    rows = meter.rows({})
    for row in rows:
        if row["name"] in queries:
            row["queries"] = queries[row["name"]]
    out = {"database": args.vendor, "tasks": info["tasks"], "migrate_s": migrated, "load": load, "rows": rows}
    if args.explain:
        targets = {
            **_jobs(),
            "/metrics (warm)": lambda: staff.get("/metrics"),
            "changes feed: from 0": lambda: agent_client.get("/api/v1/changes/", {"since": 0}),
        }
        out["plans"] = {name: _plans(call) for name, call in targets.items() if not args.only or args.only in name}
    text = json.dumps(out, indent=2, default=str)
    if args.out:
        Path(args.out).write_text(text)
    for row in rows:
        print(
            f"{row['name']:<32} median {row['median_ms']:>10} ms  cpu {row['cpu_ms']:>9} ms  "
            f"db {row['db_cpu_ms']} ms  queries {row.get('queries', '-')}"
        )
    for name, plans in out.get("plans", {}).items():
        print(f"\n=== {name}")
        for plan in plans:
            print(plan)
    print(f"load {load}")
    if not args.keep:
        _drop(args.vendor, clone)
    return 0


STEADY = "job: queue-wait check (backlog alerted)"


def _alert_backlog() -> None:
    from django.db.models import F

    from ledger.models import Task, TaskStatus

    Task.objects.filter(status=TaskStatus.READY, ready_since__isnull=False).update(
        queue_wait_alerted_for=F("ready_since")
    )


def _reads(meter: Any, client: Any, staff: Any) -> None:
    from ledger.models import Event

    newest = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    for name, since in (("changes feed: the newest 100", max(0, newest - 100)), ("changes feed: from 0", 0)):
        response = meter.run("read", name, client.get, "/api/v1/changes/", {"since": since})
        if response.status_code != 200:
            raise RuntimeError(f"{name} answered {response.status_code}")
    meter.run("read", "/metrics (warm)", staff.get, "/metrics")


def _jobs() -> dict[str, Any]:
    from insight.jobs import check_incidents_job
    from insight.services import rollups, task_counts
    from leases.jobs import check_queue_wait_job, sweep_expired_job
    from reconciliation.jobs import reconcile_job

    def folds() -> tuple[int, int]:
        return task_counts.task_counts_fold(), rollups.fleet_tally_fold()

    return {
        "job: rollup folds": folds,
        "job: sweep (and its folds)": sweep_expired_job,
        "job: queue-wait check": check_queue_wait_job,
        "job: reconcile": reconcile_job,
        "job: incident check": check_incidents_job,
    }


def _counted(meter: Any, name: str, job: Any) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        meter.run("job", name, job)
    return len(captured.captured_queries)


def _plans(job: Any) -> list[str]:
    """Each read of one call of `job`, with its plan (the slowest first on PostgreSQL)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        job()
    plans = []
    for query in captured.captured_queries:
        sql = query["sql"]
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            plans.append((0.0, f"-- {query['time']} s: {sql[:300]}"))
            continue
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + sql)
            lines = [" | ".join(str(cell) for cell in row) for row in cursor.fetchall()]
        plans.append((float(query["time"] or 0), f"-- {query['time']} s: {sql[:1500]}\n" + "\n".join(lines)))
    return [text for _, text in sorted(plans, key=lambda item: -item[0])]


def _drop(vendor: str, name: str) -> None:
    if vendor == "postgresql":
        import psycopg

        from bench.environment import pg_admin_url

        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{PREFIX}{name}" WITH (FORCE)')
    else:
        shutil.rmtree(ROOT / name, ignore_errors=True)


def drop(args: argparse.Namespace) -> int:
    _drop(args.vendor, f"tpl_{args.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jobs_growth")
    parser.add_argument("command", choices=("seed", "measure", "drop"))
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--name", required=True, help="the template's name, e.g. 10k")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--only", default="", help="with --explain: only the jobs whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the measured clone")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    args.vendor = "postgresql" if args.database == "postgres" else "sqlite"
    return {"seed": seed, "measure": measure, "drop": drop}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
