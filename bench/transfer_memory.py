"""Peak memory of `export_project` and `import_project` on a large project (docs/operations.md, "Export and import").

    python -m bench.transfer_memory [--tasks 10000] [--events 100000]

On a fresh database of its own: a temporary SQLite data directory, or, with
DATABASE_URL set, a new database on that PostgreSQL server (dropped after).
It seeds one project in bulk (bench.data: tasks, one finished attempt per
task, events spread over the tasks), then runs `manage.py check` (the
baseline: Django and the apps loaded), `export_project` and `import_project
--as` each in a process of its own and reports each one's peak resident set
size (`getrusage(RUSAGE_SELF).ru_maxrss`) and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURED = """
import atexit, resource, sys, time
start = time.monotonic()
atexit.register(lambda: sys.stderr.write(
    f"\\nPEAK_RSS_KB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} SECONDS={time.monotonic() - start:.1f}\\n"))
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", *sys.argv[1:]])
"""
EVENT_COLUMNS = ("project_id", "task_id", "attempt_id", "type", "severity", "payload", "created_at")


def seed(tasks: int, events: int) -> None:
    """Runs inside the measured database's environment (`--seed`)."""
    import django

    django.setup()
    from bench.data import _copy_rows, bulk_history, bulk_ready_tasks, make_project
    from leases.models import Attempt
    from ledger.models import EventType

    fleet = make_project("big", agents=1)
    first, last = bulk_ready_tasks(fleet.project, tasks, body_bytes=200)
    now = datetime.now(UTC)
    bulk_history(
        fleet.project, fleet.agents[0], first_task=first, last_task=last, finished_per_task=1, lapsed=False, now=now
    )
    attempts = list(Attempt.objects.filter(task__project=fleet.project).order_by("id").values_list("id", flat=True))
    start = now - timedelta(days=1)

    def rows() -> Iterator[tuple[Any, ...]]:
        for index in range(events):
            task = first + index % tasks
            payload = json.dumps({"note": index, "kind": "progress", "version": index % 7})
            created = start + timedelta(milliseconds=index)
            yield (fleet.project.pk, task, attempts[index % tasks], EventType.NOTE_ADDED, "info", payload, created)

    _copy_rows("ledger_event", EVENT_COLUMNS, rows())


def _measured(env: dict[str, str], *args: str) -> tuple[int, float]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    found = re.search(r"PEAK_RSS_KB=(\d+) SECONDS=([\d.]+)", done.stderr)
    assert found is not None, done.stderr
    return int(found.group(1)), float(found.group(2))


@contextmanager
def _database(data_dir: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_DATA_DIR": str(data_dir),
            "LEASEHOLD_SECRET_KEY": "bench-secret-key-not-for-production-0123456789",
        }
    )
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        yield env
        return
    import psycopg

    name = f"bench_transfer_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + name
    try:
        yield env
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.seed:
        seed(options.tasks, options.events)
        return
    with tempfile.TemporaryDirectory() as temporary, _database(Path(temporary)) as env:
        subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.transfer_memory",
                "--seed",
                "--tasks",
                str(options.tasks),
                "--events",
                str(options.events),
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
        export = Path(temporary) / "big.jsonl"
        results = {
            "baseline (manage.py check)": _measured(env, "check"),
            "export_project": _measured(env, "export_project", "big", "--output", str(export)),
            "import_project": _measured(env, "import_project", str(export), "--as", "copy", "--key-prefix", "COPY"),
        }
        engine = "PostgreSQL" if "DATABASE_URL" in env else "SQLite"
        size = export.stat().st_size / 1e6
        print(f"{engine}: {options.tasks} tasks, {options.events} events; export file {size:.1f} MB")
        for name, (kilobytes, seconds) in results.items():
            print(f"  {name:28} peak RSS {kilobytes / 1024:7.1f} MiB  {seconds:6.1f} s")


if __name__ == "__main__":
    main()
