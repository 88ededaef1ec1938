"""`python -m bench growth`: the growth workload (issue 33), each row as a ratio to its smallest scale's.

    python -m bench growth                                   # PostgreSQL, 10k and 100k tasks
    python -m bench growth --scales 10k,100k,1m --database postgres
    python -m bench growth --scales 10k,100k --database both --runs 3

For each database and each scale (tasks; `k` and `m` suffixes), a child process of its own seeds a fresh
database (`bench.growth_seed`: 3 attempts, 3 notes, 1 allocation and 10 events per task over 60 days),
then measures `--runs` times every row of `bench.growth_measure` (agent operations and their raw
replay, search and its raw statements, the changes feed, `/metrics`, the jobs, the console pages), and
once the storage rows (`bench.growth_storage`), and, at the largest scale, claim-next at 100 and 10,000
held leases (`bench.held`). The parent prints, per row, the median at each scale and its ratio to the
smallest scale's (the median of the per-run ratios, and their range), the ratios of process and
database CPU, and whether it is over `--limit` (2x); it writes `bench/results/growth-<database>.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.results import RESULTS_DIR

LIMIT = 2.0
SUFFIXES = {"k": 1_000, "m": 1_000_000}


def parse_scales(text: str) -> tuple[int, ...]:
    """`10k,100k,1m` -> (10000, 100000, 1000000): increasing positive task counts."""
    scales = []
    for part in text.lower().split(","):
        part = part.strip()
        multiplier = SUFFIXES.get(part[-1:], 1)
        number = part[:-1] if part[-1:] in SUFFIXES else part
        try:
            scales.append(int(float(number) * multiplier))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected task counts such as 10k,100k,1m, not {text!r}") from None
    if not scales or scales[0] < 10 or any(b <= a for a, b in itertools.pairwise(scales)):
        raise argparse.ArgumentTypeError(f"expected increasing task counts of at least 10, not {text!r}")
    return tuple(scales)


def label(tasks: int) -> str:
    if tasks % 1_000_000 == 0:
        return f"{tasks // 1_000_000}M"
    return f"{tasks // 1_000}k" if tasks % 1_000 == 0 else str(tasks)


# --- one scale (a child process, or the test database) -------------------------------------------


def measure_scale(
    target: Any,
    tasks: int,
    *,
    repeat: int,
    runs: int,
    cycles: int,
    held: bool,
    setup: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Seed `tasks` tasks into `target` (configured, migrated, empty) and measure; the scale's payload.
    With `setup` (`reuse_setup`: a kept database), measure what is there without seeding."""
    from bench import growth_measure as measure
    from bench import growth_seed, growth_storage

    if setup is None:
        setup = seed_scale(tasks, extra=_extra(runs, repeat, cycles), progress=progress)
    started = time.perf_counter()
    lapsed = growth_seed.align_lapses(datetime.now(UTC), measuring_project=setup["project"])
    queue_wait_aligned = growth_seed.align_queue_wait(datetime.now(UTC))
    load = [os.getloadavg()[0]]
    database = target.env["DATABASE_URL"].rsplit("/", 1)[1] if target.is_postgres else None
    agent_client, staff = measure.clients(setup["token"])
    per_run = []
    for run in range(runs):
        meter = measure.Meter(database)
        if run == 0:
            measure.first_scrape(meter, staff)
        measure.agent_cycles(meter, setup, agent_client, repeat)
        measure.raw_cycles(meter, setup, target, repeat)
        measure.reads(meter, setup, agent_client, staff, repeat)
        measure.jobs(meter, max(2, repeat // 5))
        measure.landed_outside_check(meter, max(2, repeat // 5))
        page_rows = measure.pages(meter, setup["links"], max(3, repeat // 4))
        per_run.append(meter.rows(measure.REFERENCES) + page_rows)
        load.append(os.getloadavg()[0])
    storage = [*growth_storage.per_row(), growth_storage.per_cycles(setup, cycles)]
    held_rows = _held(target, tasks) if held else []
    return {
        "database": target.vendor,
        "tasks": tasks,
        "sizes": setup["sizes"],
        "seed_seconds": setup["seed_seconds"],
        "seed_phases": setup.get("phases", {}),
        "reused": setup.get("reused"),
        "lapsed_at_start": lapsed,
        "queue_wait_aligned_at_start": queue_wait_aligned,
        "measure_seconds": round(time.perf_counter() - started, 1),
        "load_1min": [round(value, 2) for value in load],
        "runs": per_run,
        "storage": storage,
        "held": held_rows,
    }


def _extra(runs: int, repeat: int, cycles: int) -> int:
    """Fresh ready tasks a measurement consumes at most (its claims, the storage cycles), and a margin."""
    return runs * 2 * repeat + cycles + 50


def seed_scale(tasks: int, *, extra: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`bench.growth_seed.seed` at a clock frozen at its start; the setup, with "seed_seconds" and "seeded_at"."""
    from bench import data, growth_seed
    from ledger import clock

    data.offset_ids()  # a captured parameter's value names one symbol (the raw replay's capture)
    now = datetime.now(UTC).replace(microsecond=0)
    started = time.perf_counter()
    clock.freeze(now)
    try:
        setup = growth_seed.seed(tasks, now, extra=extra, progress=progress)
    finally:
        clock.unfreeze()
    return {**setup, "seed_seconds": round(time.perf_counter() - started, 1), "seeded_at": now.isoformat()}


# --- kept databases (`--keep`, `--seed-only`, `--reuse`) -------------------------------------------

SEED_FILE = "growth-seed.json"  # a kept SQLite database's record, beside its file


def kept_record(setup: dict[str, Any], tasks: int) -> dict[str, Any]:
    """What `reuse_setup` needs of a finished seed (stored with the database: its comment on PostgreSQL)."""
    from bench.environment import KEPT_MARKER

    return {
        "marker": KEPT_MARKER,
        "workload": "growth",
        "tasks": tasks,
        "sizes": setup["sizes"],
        "links": setup["links"],
        "project": setup["project"].pk,
        "agent": setup["agent"].pk,
        "seeded_at": setup["seeded_at"],
        "seed_seconds": setup["seed_seconds"],
        "phases": setup.get("phases", {}),
        "measured": 0,
    }


def kept_name(vendor: str, tasks: int) -> str:
    from bench.environment import PG_KEPT_DATABASE_PREFIX

    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    if vendor == "postgresql":
        return f"{PG_KEPT_DATABASE_PREFIX}growth_{label(tasks).lower()}_{stamp}"
    return tempfile.mkdtemp(prefix=f"leasehold-kept-growth-{label(tasks).lower()}-{stamp}-")


def write_record(target: Any, record: dict[str, Any]) -> None:
    if target.is_postgres:
        import psycopg

        from bench.environment import pg_admin_url

        name = target.dsn.rsplit("/", 1)[1]
        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            literal = json.dumps(record, default=str).replace("'", "''")
            conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{literal}'")
        return
    Path(target.dsn).with_name(SEED_FILE).write_text(json.dumps(record, indent=2, default=str))


def read_record(vendor: str, name: str) -> dict[str, Any]:
    """The record of kept database `name`; SystemExit with the reason when there is none."""
    from bench.environment import KEPT_MARKER, pg_admin_url

    text: str | None
    if vendor == "postgresql":
        import psycopg

        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [name]
            ).fetchone()
        if row is None:
            raise SystemExit(f"--reuse: no database {name!r} on {pg_admin_url().rsplit('/', 1)[0]}")
        text = row[0]
    else:
        path = Path(name) / SEED_FILE
        text = path.read_text() if path.exists() else None
    try:
        record = json.loads(text or "")
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("marker") != KEPT_MARKER or record.get("workload") != "growth":
        raise SystemExit(
            f"--reuse: {name!r} is not a finished growth seed (no record of one: seeded with --keep or "
            "--seed-only, and its seed completed?)"
        )
    return record


def _counts() -> dict[str, int]:
    from leases.models import Attempt, Note
    from ledger.models import Event, Task

    return {
        "tasks": Task.objects.count(),
        "attempts": Attempt.objects.count(),
        "events": Event.objects.count(),
        "notes": Note.objects.count(),
    }


def check_reusable(record: dict[str, Any], tasks: int, name: str) -> dict[str, int]:
    """Refuse (SystemExit) a kept database seeded at another scale, or missing seeded rows; the row counts."""
    if record["tasks"] != tasks:
        raise SystemExit(
            f"--reuse: {name} was seeded with {label(record['tasks'])} tasks, not {label(tasks)}: "
            f"pass it as {label(record['tasks']).lower()}={name}"
        )
    counts = _counts()
    short = {
        table: (counts[table], record["sizes"][table])
        for table in counts
        if table in record["sizes"] and counts[table] < record["sizes"][table]
    }
    if short:
        detail = ", ".join(f"{table} {have:,} < {want:,} seeded" for table, (have, want) in short.items())
        raise SystemExit(f"--reuse: {name} lacks rows of its seed ({detail}): not the database its record describes")
    return counts


def _after_fleet_numbers(projects: Iterable[tuple[str, str]]) -> int:
    """The first number past every project's slug suffix (`capture-growth-12`) and key prefix (`B12`)."""
    numbers = [0]
    for slug, key_prefix in projects:
        for found in (re.search(r"-([0-9]+)$", slug), re.fullmatch(r"B([0-9]+)", key_prefix)):
            if found:
                numbers.append(int(found.group(1)))
    return max(numbers) + 1


def reuse_setup(record: dict[str, Any], tasks: int, name: str, *, extra: int) -> dict[str, Any]:
    """The setup of a kept database, as `seed_scale` returned it: the measuring agent (a fresh token), the
    project, the links, and `extra` fresh ready tasks for this measurement's claims."""
    from bench import cycles, data
    from ledger.actors import SYSTEM
    from ledger.models import Agent, Project
    from ledger.services import agent_rotate_token

    counts = check_reusable(record, tasks, name)
    # Project slugs and key prefixes of this process's fleets (`bench.data.make_project`): after every
    # number a project of this database already carries (this process's counters may be behind them,
    # or ahead of a count of the projects: other processes and earlier measurements made some).
    after = _after_fleet_numbers(Project.objects.values_list("slug", "key_prefix"))
    data._project_counter = iter(range(after, after + 10_000))
    cycles._slugs = iter(range(after, after + 1_000_000))
    project = Project.objects.get(pk=record["project"])
    agent, token = agent_rotate_token(agent=Agent.objects.get(pk=record["agent"]), actor=SYSTEM)
    data.bulk_ready_tasks(project, extra, since=datetime.now(UTC))
    return {
        "sizes": record["sizes"],
        "links": record["links"],
        "project": project,
        "agent": agent,
        "token": token,
        "seed_seconds": record["seed_seconds"],
        "phases": record.get("phases", {}),
        "reused": {"name": name, "measured_before": record.get("measured", 0), "rows": counts},
    }


def parse_reuse(text: str) -> dict[int, str]:
    """`1m=leasehold_kept_growth_1m_…[,10k=…]` -> {1000000: name}."""
    reuse: dict[int, str] = {}
    for part in text.split(","):
        scale, sep, name = part.strip().partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"expected SCALE=NAME[,SCALE=NAME], not {text!r}")
        (tasks,) = parse_scales(scale)
        reuse[tasks] = name.strip()
    return reuse


def _held(target: Any, tasks: int) -> list[dict[str, Any]]:
    """`bench.held`'s rows (claim-next at 100 and 10,000 held leases; 10 and 500 at a smoke scale)."""
    from django.db import reset_queries

    from bench.held import held
    from bench.sizes import FULL, SMOKE

    # The pages' capture filled the connection's query log (9,000 entries, then it drops the oldest);
    # `bench.capture` counts on it to log every statement of the capture.
    reset_queries()
    rows, _ = held(target, SMOKE if tasks < 10_000 else FULL)
    return [
        {
            "name": f"{row.workload} ({row.mode})",
            "ops": row.ops,
            "p50_ms": row.p50_ms,
            "p99_ms": row.p99_ms,
            "vs_raw": row.ratio,
            **{key: value for key, value in row.extra.items() if key.startswith("vs_") or key == "held_after"},
            "errors": row.errors,
        }
        for row in rows
    ]


def child(vendor: str, tasks: int, args: argparse.Namespace) -> int:
    from bench.environment import configure_django, create_target, drop_target, existing_target, migrate, new_workdir

    def say(text: str) -> None:
        print(text, flush=True)

    reused = args.reuse.get(tasks) if args.reuse else None
    keep = args.keep or args.seed_only
    record: dict[str, Any] | None = None
    if reused:
        record = read_record(vendor, reused)
        target = existing_target(vendor, reused)
        workdir = None if vendor == "sqlite" else Path(target.env["LEASEHOLD_DATA_DIR"])
    elif keep:
        name = kept_name(vendor, tasks)
        workdir = Path(name) if vendor == "sqlite" else new_workdir()
        target = create_target(vendor, workdir=workdir, database_name=None if vendor == "sqlite" else name)
    else:
        workdir = new_workdir()
        target = create_target(vendor, workdir=workdir, database_name=f"leasehold_bench_{os.getpid()}")
    target.env["LEASEHOLD_ALLOWED_HOSTS"] = "testserver,localhost"
    name = target.dsn.rsplit("/", 1)[1] if target.is_postgres else str(Path(target.dsn).parent)
    configure_django(target)
    seeded = False
    try:
        migrate()
        extra = _extra(args.runs, args.repeat, args.cycles)
        if record is not None:
            setup = reuse_setup(record, tasks, name, extra=extra)
            say(f"growth {vendor} {label(tasks)}: measuring kept database {name} (seeded {record['seeded_at']})")
        else:
            setup = seed_scale(tasks, extra=extra, progress=say)
            seeded = True
            if keep:
                record = kept_record(setup, tasks)
                write_record(target, record)
                say(f"growth {vendor} {label(tasks)}: seeded in {setup['seed_seconds']} s; kept database: {name}")
        if args.seed_only:
            payload: dict[str, Any] = {"database": target.vendor, "tasks": tasks, "sizes": setup["sizes"]}
            payload |= {"seed_seconds": setup["seed_seconds"], "seed_phases": setup["phases"]}
        else:
            payload = measure_scale(
                target, tasks, repeat=args.repeat, runs=args.runs, cycles=args.cycles, held=args.held_here,
                setup=setup, progress=say,
            )  # fmt: skip
            if record is not None:
                record["measured"] = record.get("measured", 0) + 1
                write_record(target, record)
        payload["database_name"] = name if (keep or reused) else None
        args.out.write_text(json.dumps(payload, indent=2, default=str))
    finally:
        from bench.cycles import release_pool

        release_pool()
        if not reused and not (keep and seeded):
            drop_target(target)
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
        elif vendor == "postgresql" and workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)  # the secret key and scratch files; the database stays
    return 0


# --- the comparison ------------------------------------------------------------------------------


def _ratio(large: float | None, small: float | None) -> float | None:
    return round(large / small, 2) if large is not None and small else None


def compare(payloads: list[dict[str, Any]], *, limit: float = LIMIT) -> list[dict[str, Any]]:
    """Per row: the median at each scale, each scale's ratio to the first (median of the per-run ratios,
    and their range), CPU ratios (process, database) and whether the largest scale is over `limit`."""
    base = payloads[0]
    rows: list[dict[str, Any]] = []
    names = [row["name"] for row in base["runs"][0]]
    for name in names:
        entry: dict[str, Any] = {"name": name, "group": None, "scales": []}
        for payload in payloads:
            runs = [next((row for row in run if row["name"] == name), None) for run in payload["runs"]]
            found = [row for row in runs if row is not None]
            if not found:
                continue
            entry["group"] = found[0]["group"]
            medians = [row["median_ms"] for row in found]
            bases = [next((r for r in run if r["name"] == name), None) for run in base["runs"]]
            paired: list[float] = []
            for row, base_row in zip(runs, bases, strict=False):
                value = None if row is None or base_row is None else _ratio(row["median_ms"], base_row["median_ms"])
                if value is not None:
                    paired.append(value)
            entry["scales"].append(
                {
                    "tasks": payload["tasks"],
                    "median_ms": round(statistics.median(medians), 3),
                    "ratio": round(statistics.median(paired), 2) if paired else None,
                    "range": (min(paired), max(paired)) if paired else None,
                    "cpu_ms": _mean(found, "cpu_ms"),
                    "db_cpu_ms": _mean(found, "db_cpu_ms"),
                    "vs_raw": _mean(found, "vs_raw"),
                }
            )
        first, last = entry["scales"][0], entry["scales"][-1]
        entry["cpu_ratio"] = _ratio(last["cpu_ms"], first["cpu_ms"])
        entry["db_cpu_ratio"] = _ratio(last["db_cpu_ms"], first["db_cpu_ms"])
        entry["over"] = last["ratio"] is not None and last["ratio"] > limit
        rows.append(entry)
    return rows


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return round(statistics.fmean(values), 3) if values else None


def render(payloads: list[dict[str, Any]], rows: list[dict[str, Any]], *, limit: float = LIMIT) -> str:
    scales = [label(payload["tasks"]) for payload in payloads]
    head = " | ".join(f"{scale} ms" + ("" if index == 0 else f" | x ({scale}/{scales[0]}), range")
                      for index, scale in enumerate(scales))  # fmt: skip
    lines = [
        f"### {payloads[0]['database']}: "
        + "; ".join(
            f"{label(p['tasks'])} seeded in {p['seed_seconds']} s, measured in {p['measure_seconds']} s, "
            f"load {min(p['load_1min'])}-{max(p['load_1min'])}"
            for p in payloads
        ),
        "",
        f"| row | {head} | CPU x | DB CPU x | vs raw (last) | over {limit:g}x |",
        "| --- |" + " ---: |" * (2 * len(scales) - 1) + " ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        cells = [row["name"]]
        for index, scale in enumerate(row["scales"]):
            cells.append(f"{scale['median_ms']:g}")
            if index:
                spread = scale["range"]
                cells.append(
                    "-" if scale["ratio"] is None else f"{scale['ratio']:.2f} ({spread[0]:.2f}-{spread[1]:.2f})"
                )
        cells += ["-"] * (1 + 2 * (len(scales) - 1) - (len(cells) - 1))
        cells += [_cell(row["cpu_ratio"]), _cell(row["db_cpu_ratio"]), _cell(row["scales"][-1]["vs_raw"])]
        cells.append("**yes**" if row["over"] else "")
        lines.append("| " + " | ".join(cells) + " |")
    over = [row["name"] for row in rows if row["over"]]
    lines += ["", f"Over {limit:g}x at {scales[-1]}: {', '.join(over)}." if over else f"Every row within {limit:g}x."]
    lines += ["", "| storage | " + " | ".join(scales) + " |", "| --- |" + " ---: |" * len(scales)]
    for index, row in enumerate(payloads[0]["storage"]):
        cells = [str(payload["storage"][index]["per_row"]) for payload in payloads]
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    for payload in payloads:
        for held in payload["held"]:
            extra = ", ".join(f"{key} {value}" for key, value in held.items() if key.startswith("vs_"))
            lines.append(f"- {label(payload['tasks'])} {held['name']}: p50 {held['p50_ms']} ms; {extra}")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# --- the command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scales", type=parse_scales, default=parse_scales("10k,100k"), help="tasks per scale")
    parser.add_argument("--database", choices=("postgres", "sqlite", "both"), default="postgres")
    parser.add_argument("--repeat", type=int, default=20, help="calls per row per run")
    parser.add_argument("--runs", type=int, default=3, help="measurements of every row per scale")
    parser.add_argument("--cycles", type=int, default=1000, help="agent cycles for the storage row")
    parser.add_argument("--limit", type=float, default=LIMIT)
    parser.add_argument("--no-held", action="store_true", help="skip claim-next at held leases")
    parser.add_argument(
        "--keep", action="store_true", help="keep each scale's seeded database (its name is printed) for --reuse"
    )
    parser.add_argument("--seed-only", action="store_true", help="seed and keep each scale; measure nothing")
    parser.add_argument(
        "--reuse",
        type=parse_reuse,
        default=None,
        metavar="SCALE=NAME[,SCALE=NAME]",
        help="measure these scales on databases kept by --keep/--seed-only instead of seeding them",
    )
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--held-here", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    vendors = {"postgres": ["postgresql"], "sqlite": ["sqlite"], "both": ["postgresql", "sqlite"]}[args.database]
    if args.reuse and args.child is None:
        if args.database == "both":
            raise SystemExit("--reuse names databases of one kind: pass --database postgres or --database sqlite")
        missing = [label(tasks) for tasks in args.reuse if tasks not in args.scales]
        if missing:
            raise SystemExit(f"--reuse names scales not in --scales ({', '.join(missing)}): add them to --scales")
        if args.seed_only:
            raise SystemExit("--seed-only seeds; --reuse measures: not both")
    if args.child is not None:
        return child(vendors[0], args.child, args)
    status = 0
    kept: list[str] = []
    for vendor in vendors:
        payloads = []
        for tasks in args.scales:
            out = RESULTS_DIR / f"growth-{vendor}-{label(tasks)}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", "bench", "growth", "--child", str(tasks), "--out", str(out)]
            command += ["--database", "postgres" if vendor == "postgresql" else "sqlite"]
            command += ["--repeat", str(args.repeat), "--runs", str(args.runs), "--cycles", str(args.cycles)]
            if tasks == args.scales[-1] and not args.no_held:
                command.append("--held-here")
            command += ["--keep"] if args.keep else []
            command += ["--seed-only"] if args.seed_only else []
            if args.reuse and tasks in args.reuse:
                command += ["--reuse", f"{tasks}={args.reuse[tasks]}"]
            print(f"== growth {vendor} {label(tasks)}", flush=True)
            code = subprocess.call(command)
            if code:
                print(f"growth {vendor} {label(tasks)}: the child exited {code}", file=sys.stderr)
                status = 1
                break
            payloads.append(json.loads(out.read_text()))
            if payloads[-1].get("database_name"):
                kept.append(f"{label(tasks).lower()}={payloads[-1]['database_name']}")
        if kept:
            print(f"kept {vendor} databases: {','.join(kept)}", flush=True)
            print(f"measure them again with: --database {args.database} --reuse {','.join(kept)}", flush=True)
        if not payloads or args.seed_only:
            continue
        rows = compare(payloads, limit=args.limit)
        print(render(payloads, rows, limit=args.limit), flush=True)
        summary = RESULTS_DIR / f"growth-{vendor}.json"
        summary.write_text(json.dumps({"payloads": payloads, "rows": rows}, indent=2, default=str))
        print(f"results: {summary}", flush=True)
    return status
