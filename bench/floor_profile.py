"""Leasehold's request, profiled inside its gunicorn workers and split by layer (bench/floor.py's profile).

Two halves:

- A gunicorn config module (`--config python:bench.floor_profile`): each
  worker wraps its `handle` (the request thread's whole work for one request:
  reading and parsing it, the WSGI call, writing the answer) in a
  `cProfile.Profile` per request thread, timed by that thread's CPU
  (`time.thread_time`), and dumps them at exit into
  `LEASEHOLD_BENCH_FLOOR_PROFILE_DIR`. The worker's main thread (the event
  loop: accept, poll, keep-alive) is not profiled; its CPU is read from
  `/proc/<pid>/task/<pid>/stat` and reported beside.
- `profile_leasehold`: serves Leasehold with `manage.py serve`'s command line
  plus that config, runs the floor's client against it, and splits the
  merged profile (`layers`).

The split is by cumulative time of the entry into each layer (a function's
time counted once, from its outermost call), nested: gunicorn is what the
request thread spends outside the WSGI application; Django's handler and
middleware what the application spends outside DRF's dispatch; DRF's dispatch
itself is split into the input and output serializers, the view's call into
the services (`run_mutation` and what it calls, services and their ORM and
driver included), and the rest (authentication, permission, throttle,
negotiation, the envelope). The database driver (psycopg or sqlite3, entered
from outside it) is reported across all layers, and each package's own time
(`tottime`) beside.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# --- the gunicorn config half (imported by gunicorn, not by the bench) -----------------------------


def post_worker_init(worker: Any) -> None:
    folder = Path(os.environ["LEASEHOLD_BENCH_FLOOR_PROFILE_DIR"])
    switch = folder / "on"
    local = threading.local()
    profiles: list[cProfile.Profile] = []
    worker._floor_profiles = profiles
    worker._floor_main_at_on = None
    original = worker.handle

    def handle(conn: Any) -> Any:
        if not switch.exists():  # the warm-up cycles (first-call imports, the URLconf) are not profiled
            return original(conn)
        if worker._floor_main_at_on is None:
            worker._floor_main_at_on = _thread_cpu(os.getpid(), os.getpid())
        profiler = getattr(local, "profiler", None)
        if profiler is None:
            profiler = local.profiler = cProfile.Profile(time.thread_time)
            profiles.append(profiler)
        profiler.enable()
        try:
            return original(conn)
        finally:
            profiler.disable()

    worker.handle = handle


def worker_exit(server: Any, worker: Any) -> None:
    folder = Path(os.environ["LEASEHOLD_BENCH_FLOOR_PROFILE_DIR"])
    for index, profiler in enumerate(getattr(worker, "_floor_profiles", [])):
        profiler.dump_stats(str(folder / f"worker-{os.getpid()}-{index}.prof"))
    began = getattr(worker, "_floor_main_at_on", None)
    if began is not None:
        (folder / f"worker-{os.getpid()}.main").write_text(f"{_thread_cpu(os.getpid(), os.getpid()) - began}\n")


def _thread_cpu(pid: int, tid: int) -> float:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the bench half -------------------------------------------------------------------------------

SERVICES = {"lease_claim_next", "attempt_renew", "note_add", "attempt_finish"}


def _outermost(stats: pstats.Stats, match: Any) -> float:
    """Cumulative seconds of the functions `match` accepts, counted from callers it does not accept."""
    total = 0.0
    for func, (_cc, _nc, _tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if not match(func):
            continue
        if not callers:
            total += ct
            continue
        for caller, caller_stats in callers.items():
            if not match(caller):
                total += caller_stats[3]
    return total


def _package(func: tuple[str, int, str]) -> str:
    filename, _, name = func
    path = filename.replace("\\", "/")
    if "sqlite3" in name or "/psycopg" in path or (path == "~" and "SQLiteCursorWrapper" in name):
        # Django's SQLiteCursorWrapper.execute is sqlite3's C execute (the engine's work) as cProfile names it
        return "database driver"
    if "/gunicorn/" in path or path.endswith(("config/gunicorn.py", "core/parking.py")):
        return "gunicorn"
    if "/rest_framework/" in path:
        return "DRF"
    if "/django/db/" in path:
        return "Django ORM"
    if "/django/" in path:
        return "Django"
    if "site-packages" in path:
        return "other libraries"
    if path.startswith("~") or "/lib/python3" in path:
        return "stdlib and builtins"
    return "Leasehold"


def split(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per layer (see the module's docstring); `total` is the profile's."""
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in stats.stats.values())  # type: ignore[attr-defined]

    def named(files: tuple[str, ...], names: set[str]) -> Any:
        return lambda func: func[2] in names and func[0].replace("\\", "/").endswith(files)

    app = _outermost(stats, named(("api/lean.py", "django/core/handlers/wsgi.py"), {"__call__"}))
    dispatch = _outermost(stats, named(("rest_framework/views.py",), {"dispatch"}))
    authentication = _outermost(stats, named(("api/auth.py",), {"authenticate"}))
    throttle = _outermost(stats, named(("api/throttles.py",), {"allow_request"}))
    parsing = _outermost(stats, named(("api/inputs.py",), {"body_input"}))
    rendering = _outermost(stats, named(("api/inputs.py", "rest_framework/renderers.py"), {"render"}))
    request_log = _outermost(stats, named(("api/request_log.py",), {"__call__"})) - _outermost(
        stats, named(("core/deadline.py",), {"__call__"})
    )
    mutation = _outermost(stats, named(("api/mutations.py",), {"run_mutation"}))
    services = _outermost(stats, lambda func: func[2] in SERVICES and "/leases/services/" in func[0])
    driver = _outermost(stats, lambda func: _package(func) == "database driver")
    layers = {
        "total": total,
        "gunicorn (request thread, outside the WSGI call)": total - app,
        "Django handler and middleware (outside DRF's dispatch)": app - dispatch,
        "  of which the request log middleware's own (outside the storage deadline's)": request_log,
        "  of which rendering the answer (JSON renderer, after the view)": rendering,
        "DRF dispatch (negotiation, permission, envelope; outside the rows below)": dispatch
        - authentication
        - throttle
        - parsing
        - mutation,
        "authentication (the token's statement included)": authentication,
        "throttle": throttle,
        "body parsing and the input serializer": parsing,
        "run_mutation outside the services (idempotency, transaction, the answer's dict, work context)": mutation
        - services,
        "services (with their ORM and driver)": services,
        "database driver (all statements, across the layers)": driver,
    }
    own: dict[str, float] = {}
    for func, (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        own[_package(func)] = own.get(_package(func), 0.0) + tt
    layers.update({f"own time: {name}": seconds for name, seconds in sorted(own.items())})
    return layers


def profile_leasehold(target: Any, project: tuple[Any, str, Any], *, cycles: int, warm: int) -> dict[str, Any]:
    """Serve Leasehold with the profiling config, run `cycles` of the floor's client; the split per cycle (ms)."""
    from bench import http as served
    from bench.floor import Client
    from bench.processes import PROJECT_ROOT
    from operations.management.commands.serve import gunicorn_command

    folder = Path(tempfile.mkdtemp(prefix="leasehold-floor-profile-"))
    port = served.free_port()
    command = gunicorn_command("config.wsgi:application", bind=f"127.0.0.1:{port}", workers=2, threads=8)
    command += ["--config", "python:bench.floor_profile"]
    env = {
        **os.environ,
        **target.env,
        "PYTHONPATH": str(PROJECT_ROOT),
        "LEASEHOLD_BENCH_FLOOR_PROFILE_DIR": str(folder),
    }
    env |= {"LEASEHOLD_WEB_WORKERS": "2", "LEASEHOLD_WEB_THREADS": "8"}
    process = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    server = served.Server("127.0.0.1", port, process.pid)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = server.call("POST", "/api/v1/claims/next/", token=served.UNAUTHENTICATED, body={})
                if status in (401, 403):
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise served.HttpError("the profiled server did not start")
            time.sleep(0.2)
        client = Client(port, project[1])
        try:
            for _ in range(warm):
                client.cycle(project[2].slug)
            (folder / "on").touch()
            for _ in range(cycles):
                client.cycle(project[2].slug)
        finally:
            client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    files = sorted(str(path) for path in folder.glob("*.prof"))
    if not files:
        raise RuntimeError("the profiled workers wrote no profile")
    stats = pstats.Stats(*files)
    every = cycles
    result = {name: round(seconds * 1000 / every, 3) for name, seconds in split(stats).items()}
    main = sum(float(path.read_text()) for path in folder.glob("*.main"))
    result["workers' main threads (event loop), ms per cycle"] = round(main * 1000 / every, 3)
    result["cycles"] = every
    keep = os.environ.get("LEASEHOLD_BENCH_PROFILE_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        stem = Path(keep) / f"floor-leasehold-{target.vendor}"
        stats.dump_stats(f"{stem}.prof")
        with open(f"{stem}.txt", "w") as text:
            pstats.Stats(*files, stream=text).sort_stats("cumulative").print_stats(60)
    shutil.rmtree(folder, ignore_errors=True)
    return result


if __name__ == "__main__":
    import sys

    # python -m bench.floor_profile FILE.prof CYCLES: the split of a saved profile, ms per cycle
    saved, count = sys.argv[1], int(sys.argv[2])
    for layer, seconds in split(pstats.Stats(saved)).items():
        print(f"{seconds * 1000 / count:9.3f}  {layer}")
