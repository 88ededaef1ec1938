"""Connections budgeted (SPEC §25): N servers' pools and clusters behind PgBouncer, against max_connections 100.

    .venv/bin/python -m bench.connections [--servers 8] [--seconds 90] [--direct]

A PostgreSQL of its own (initdb in a temporary directory, `max_connections=100`, so the shared
test server is neither measured nor crowded), the application's schema migrated into it, a
non-superuser role `leasehold` owning the database with `jit = off` and `lock_timeout` set on the
role (what docs/operations.md tells an operator behind PgBouncer). Then, per simulated server:

- its web side: `--workers` (2) processes, each the application's own settings
  (`LEASEHOLD_DB_TRANSACTION_POOLING=1`) with its pool opened at full size
  (`LEASEHOLD_DB_POOL_MIN` = the budget's pool size) and every pool thread running short real
  read transactions back to back for the whole run, and the process's LISTEN connection (the
  event watcher, straight to PostgreSQL);
- its cluster: a real `manage.py qcluster` (2 workers, the ORM broker) through the PgBouncer
  database of its own (`leasehold_jobs`, LEASEHOLD_CLUSTER_DATABASE_URL), the schedules due.

Measured: the peak of PostgreSQL's client backends (sampled every 0.2 s), refused connections in
every log, the web transactions done, and the sweeps the schedulers ran (django-q2 successes of
`leases.jobs.sweep_expired_job`, and whether the scheduler heartbeat `/readyz` reads is fresh).
`--direct`: the same servers without PgBouncer (each server's full budget straight to PostgreSQL).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.pgbouncer import free_port, running_pgbouncer
from core.connections import ConnectionBudget

ROOT = Path(__file__).resolve().parents[1]
WORKERS, THREADS, CLUSTER_WORKERS = 2, 8, 2
WEB_POOL, JOBS_POOL = 60, 10  # PgBouncer's server connections: the web servers' and the clusters'
DATABASE = "leasehold"
ROLE = "leasehold"


@contextmanager
def private_postgres(max_connections: int = 100) -> Iterator[str]:
    """A PostgreSQL of its own on a free port; yields the superuser URL."""
    version = sorted(os.listdir("/usr/lib/postgresql"))[-1]
    binaries = Path(f"/usr/lib/postgresql/{version}/bin")
    directory = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
    port = free_port()
    run_as: list[str] = []
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        os.chown(directory, postgres.pw_uid, postgres.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data = directory / "data"
    subprocess.run(
        [*run_as, str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -c max_connections={max_connections} -c listen_addresses=127.0.0.1 -k {directory}"
    pg_ctl = [*run_as, str(binaries / "pg_ctl"), "-D", str(data), "-l", str(directory / "log")]
    subprocess.run([*pg_ctl, "-o", options, "-w", "start"], check=True, capture_output=True)
    try:
        yield f"postgres://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def _base_env(workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_SECRET_KEY": secrets.token_urlsafe(48),
            "LEASEHOLD_DATA_DIR": str(workdir),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


def _sampler(admin_url: str, peak: dict[str, int], stop: threading.Event) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()
            peak["max"] = max(peak.get("max", 0), int(row[0]) if row else 0)
            time.sleep(0.2)


def measure(servers: int, seconds: float, direct: bool) -> dict[str, Any]:
    import psycopg

    budget = ConnectionBudget(WORKERS, THREADS, CLUSTER_WORKERS)
    workdir = Path(tempfile.mkdtemp(prefix="leasehold-connections-"))
    with private_postgres() as admin_url:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {ROLE} LOGIN")
            admin.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
            admin.execute(f"ALTER ROLE {ROLE} SET jit = off")
            admin.execute(f"ALTER ROLE {ROLE} SET lock_timeout = '20s'")
        direct_url = admin_url.replace("postgres@", f"{ROLE}@").rsplit("/", 1)[0] + f"/{DATABASE}"
        env = {**_base_env(workdir), "DATABASE_URL": direct_url}
        _manage(env, "migrate", "--verbosity", "0")
        _manage(env, "shell", "-c", _PREPARE)
        aliases = {"leasehold_jobs": (DATABASE, JOBS_POOL)}
        with contextlib.ExitStack() as stack:
            if direct:
                web_url = jobs_url = direct_url
                pooling: dict[str, str] = {}
            else:
                bouncer = stack.enter_context(running_pgbouncer(direct_url, pool_size=WEB_POOL, aliases=aliases))
                web_url, jobs_url = bouncer.url(direct_url), bouncer.url(direct_url, "leasehold_jobs")
                pooling = {"LEASEHOLD_DB_TRANSACTION_POOLING": "1", "LEASEHOLD_LISTEN_DATABASE_URL": direct_url}
            peak: dict[str, int] = {}
            stop = threading.Event()
            sampler = threading.Thread(target=_sampler, args=(admin_url, peak, stop), daemon=True)
            sampler.start()
            web_env = {
                **env,
                **pooling,
                "DATABASE_URL": web_url,
                "LEASEHOLD_WEB_WORKERS": str(WORKERS),
                "LEASEHOLD_WEB_THREADS": str(THREADS),
                "LEASEHOLD_DB_POOL_MIN": str(budget.pool_size),
            }
            cluster_env = {**env, **pooling, "DATABASE_URL": direct_url, "LEASEHOLD_CLUSTER_DATABASE_URL": jobs_url}
            logs = workdir / "logs"
            logs.mkdir()
            children: list[tuple[str, subprocess.Popen[bytes]]] = []
            started = time.monotonic()
            for server in range(servers):
                for worker in range(WORKERS):
                    children.append(
                        _start(
                            [sys.executable, "-m", "bench.connections", "web", "--seconds", str(seconds)],
                            web_env,
                            logs / f"web-{server}-{worker}.log",
                        )
                    )
                children.append(
                    _start([sys.executable, "manage.py", "qcluster"], cluster_env, logs / f"cluster-{server}.log")
                )
            # The web processes stop on their own once they have run `seconds` (after a start-up
            # that takes a while on a loaded machine); the clusters run until then.
            for name, child in children:
                if name.startswith("web-"):
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=max(1.0, started + seconds + 120 - time.monotonic()))
            stop.set()
            for _, child in children:
                if child.poll() is None:
                    child.terminate()
            for _, child in children:
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, 9)
                    child.wait()
            elapsed = time.monotonic() - started
        web_done = [_last_json(log) for log in sorted(logs.glob("web-*.log"))]
        refused = sum(log.read_text(errors="replace").count("too many") for log in logs.glob("*.log"))
        refused_logs = sorted(log.name for log in logs.glob("*.log") if "too many" in log.read_text(errors="replace"))
        with psycopg.connect(direct_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE func = 'leases.jobs.sweep_expired_job' AND success),"
                " count(*) FILTER (WHERE success), count(*) FILTER (WHERE NOT success),"
                " coalesce(max(extract(epoch FROM stopped - started))"
                " FILTER (WHERE func = 'leases.jobs.sweep_expired_job'), 0)"
                " FROM django_q_task"
            ).fetchone()
        sweeps, scheduled, failed, longest = row if row else (0, 0, 0, 0)
    if not os.environ.get("BENCH_KEEP"):
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "workdir": str(workdir),
        "servers": servers,
        "mode": "direct" if direct else "pgbouncer",
        "budget_per_server": budget.total,
        "client_connections": servers * budget.total,
        "peak_server_connections": peak.get("max", 0),
        "refused_connection_lines": refused,
        "refused_in": refused_logs[:6],
        "web_transactions": sum(done.get("transactions", 0) for done in web_done),
        "web_errors": sum(done.get("errors", 0) for done in web_done),
        "web_processes_reporting": sum(1 for done in web_done if done),
        "sweeps_run": int(sweeps),
        "jobs_succeeded": int(scheduled),
        "jobs_failed": int(failed),
        "longest_sweep_seconds": round(float(longest), 3),
        "seconds": round(elapsed, 1),
    }


_PREPARE = """
from datetime import timedelta
from django.utils import timezone
from django_q.models import Schedule
from operations.schedules import ensure_schedules
ensure_schedules()
Schedule.objects.update(next_run=timezone.now() - timedelta(seconds=1))
"""


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True)


def _start(command: list[str], env: dict[str, str], log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return log.name, process


def _last_json(log: Path) -> dict[str, Any]:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    return {}


def web_process(seconds: float) -> None:
    """One web worker process: the application's pool at full size, every pool thread busy, its LISTEN open."""
    import django

    django.setup()
    from django.db import connection

    from ledger.models import Event, Task
    from push.waiting import event_watcher

    unlisten = event_watcher().listen(lambda heard: None)  # the process's LISTEN connection
    counts = {"transactions": 0, "errors": 0}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run() -> None:
        while time.monotonic() < end:
            try:
                Task.objects.filter(status="ready").count()
                list(Event.objects.order_by("-id").values_list("id", flat=True)[:20])
                outcome = "transactions"
            except Exception:
                outcome = "errors"
            finally:
                connection.close()  # back to the pool, as at the end of a request
            with lock:
                counts[outcome] += 1

    pool_size = ConnectionBudget(WORKERS, THREADS, 0).pool_size
    threads = [threading.Thread(target=run) for _ in range(pool_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    unlisten()
    print(json.dumps(counts), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connections")
    sub = parser.add_subparsers(dest="command")
    web = sub.add_parser("web", help=argparse.SUPPRESS)
    web.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--direct", action="store_true", help="no PgBouncer: every server straight to PostgreSQL")
    args = parser.parse_args()
    if args.command == "web":
        web_process(args.seconds)
        return 0
    print(json.dumps(measure(args.servers, args.seconds, args.direct), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
