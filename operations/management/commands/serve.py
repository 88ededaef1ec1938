from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from core.connections import describe, server_budget, server_limits

# prctl(2): ask the kernel to send a signal to this process when its parent dies.
PR_SET_PDEATHSIG = 1


class Command(BaseCommand):
    help = (
        "Migrate, ensure the schedules, then run the web server (gunicorn) and the django-q2 "
        "cluster together until interrupted. If either stops, the other is stopped too."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
        parser.add_argument("--threads", type=int, default=8, help="request threads per worker process")
        parser.add_argument(
            "--head-timeout",
            type=float,
            default=10.0,
            help="seconds a client has to send its request head before it is disconnected",
        )
        parser.add_argument(
            "--body-timeout",
            type=float,
            default=20.0,
            help="seconds a client has to send its request body after its head before it is disconnected",
        )
        parser.add_argument(
            "--socket-timeout",
            type=float,
            default=30.0,
            help="seconds a request's socket may stall (body upload, response download) before it is closed",
        )
        parser.add_argument("--no-cluster", action="store_true", help="run the web server only")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in ("workers", "threads"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1.")
        for name in ("head_timeout", "body_timeout", "socket_timeout"):
            if not 0 < options[name] <= 3600:
                raise CommandError(f"--{name.replace('_', '-')} must be between 0 and 3600 seconds.")
        # What these create under the data directory (the database, the collected and compressed static
        # files) is the server's alone, whatever the umask serve was started with; the children keep it.
        umask = os.umask(0o077)
        try:
            call_command("migrate", interactive=False, verbosity=0)
            call_command("collectstatic", interactive=False, verbosity=0)
        finally:
            os.umask(umask)
        settings_module = os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.base")
        # Each web process sizes its connection pool from these (core.connections).
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module,
            "LEASEHOLD_WEB_WORKERS": str(options["workers"]),
            "LEASEHOLD_WEB_THREADS": str(options["threads"]),
        }
        # HeadFirstWorker reads its timeouts from these (config/gunicorn.py).
        web_env = {
            **env,
            "LEASEHOLD_HEAD_TIMEOUT_SECONDS": str(options["head_timeout"]),
            "LEASEHOLD_BODY_TIMEOUT_SECONDS": str(options["body_timeout"]),
            "LEASEHOLD_SOCKET_TIMEOUT_SECONDS": str(options["socket_timeout"]),
        }
        budget_line, budget_fits = connection_budget_line(options["workers"], options["threads"], options["no_cluster"])
        cwd = str(settings.BASE_DIR)
        bind = f"{options['host']}:{options['port']}"
        children = {
            "web": subprocess.Popen(
                gunicorn_command(
                    "config.wsgi:application", bind=bind, workers=options["workers"], threads=options["threads"]
                ),
                env=web_env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_this_process(),
            ),
        }
        if not options["no_cluster"]:
            children["cluster"] = subprocess.Popen(
                [sys.executable, "-m", "django", "qcluster"],
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_this_process(),
            )
        banner = f"Leasehold is serving on http://{bind}/ (admin at /admin/, API at /api/v1/)."
        if settings.LEASEHOLD_LOG_FORMAT == "json":
            logging.getLogger("leasehold.serve").warning(banner)  # a JSON line like every other
            logging.getLogger("leasehold.serve").warning(budget_line)
        else:
            self.stdout.write(banner)
            (self.stdout if budget_fits else self.stderr).write(budget_line)
        self.stdout.flush()

        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exited: str | None = None
        while not stopping and exited is None:
            for name, child in children.items():
                if child.poll() is not None:
                    exited = name
            time.sleep(0.2)
        # Each child leads its own process group with its workers: ask the
        # leader to stop gracefully, then end whatever is left of the group,
        # so no worker outlives serve.
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.wait()
            _signal_group(child, signal.SIGKILL)  # stragglers whose leader is gone
        if exited is not None and not stopping:
            raise CommandError(f"The {exited} process stopped (exit code {children[exited].returncode}); stopped all.")


def connection_budget_line(workers: int, threads: int, no_cluster: bool) -> tuple[str, bool]:
    """The start-up line stating this server's connection budget against what PostgreSQL allows."""
    budget = server_budget(workers, threads, cluster=not no_cluster)
    limits = server_limits(connection) if connection.vendor == "postgresql" else None
    connection.close()
    close_pool = getattr(connection, "close_pool", None)  # PostgreSQL's
    if close_pool is not None:
        close_pool()  # serve itself holds none while it runs (its pool would keep one open)
    return describe(budget, limits, transaction_pooling=settings.LEASEHOLD_DB_TRANSACTION_POOLING)


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)


def die_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child die with serve, even when serve is killed with SIGKILL.

    Each child leads a session of its own (so that Ctrl-C reaches serve alone and serve stops them in
    order), which also means nothing ends them when serve dies without stopping them: gunicorn would
    keep the port and a new serve fail "Address already in use". Linux's parent-death signal sends
    the child SIGTERM when serve goes, and each stops its own workers as on any SIGTERM. Elsewhere
    (no prctl) it is None: serve still stops its children on SIGINT and SIGTERM.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl  # looked up here, in the parent: the child only calls it
    parent = os.getpid()

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # serve died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return in_the_child


def gunicorn_command(application: str, *, bind: str, workers: int, threads: int) -> list[str]:
    """The web server's command line for the WSGI `application` ("module:name"): gunicorn as `serve` runs it.

    bench/floor.py serves its bare WSGI floor with the same command, so the two differ only in the application.
    """
    return [
        sys.executable,
        "-m",
        "gunicorn",
        application,
        "--bind",
        bind,
        "--workers",
        str(workers),
        # Slow clients wait in the event loop, not in a thread
        # (config/gunicorn.py), so no proxy is needed to survive them.
        "--worker-class",
        "config.gunicorn.HeadFirstWorker",
        "--threads",
        str(threads),
        # A request ends by its storage deadline (STORAGE_BUSY);
        # the arbiter only kills a worker that is stuck past that.
        "--timeout",
        str(settings.LEASEHOLD_STORAGE_DEADLINE_SECONDS + 10),
        *(
            # JSON lines: gunicorn's own lines as JSON, and the request log replaces its access log.
            ["--config", "python:config.gunicorn_json_logging"]
            if settings.LEASEHOLD_LOG_FORMAT == "json"
            else ["--access-logfile", "-"]
        ),
        "--graceful-timeout",
        "10",
        # The API's longest valid query string (search text and a
        # cursor, percent-encoded) must fit the request line.
        "--limit-request-line",
        "8190",
    ]
