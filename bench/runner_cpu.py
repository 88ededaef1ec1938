"""A runner's CPU per task (issue 31, SPEC §24: ≤ 50 ms), against the shell loop a user writes today.

Runner. The real daemon (`python -m agent --json runner --config runner.toml`) with `SLOTS` slots serves one
project whose command is `true`, in a real git clone, against a production server (`manage.py serve`). Once it
has registered and its slots are parked, `TASKS` tasks are created; when the last is done and every `run` child
has been reaped, the runner's `/proc/<pid>/stat` gives:

- its own CPU (utime + stime): the daemon — claims, state files, the slots' supervision, the heartbeat;
- its reaped children's (cutime + cstime): every `python -m agent run --worktree` child and what each ran and
  reaped (git for the worktree and the git facts, the command `true`: well under a millisecond of it).

Both per task. The runner's CPU at rest (slots parked, before the tasks) is reported per second beside them.

Reference. The same number of tasks done by `SLOTS` shell loops, each `while leasehold run --next --worktree
--repo R -- true; do :; done` with an agent of its own (what runs a fleet today): the CPU of every `run`
process and its children (each `run` reaped with `os.wait4`, whose usage includes what it reaped), per task,
including each loop's last `run --next` that found nothing (exit 3) and ended it. The ratio is the runner's
tree per task over the loops' per task.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import http
from bench.environment import Target
from bench.proc_cpu import TICKS
from bench.processes import PROJECT_ROOT
from bench.results import Row

SLOTS = 3
TASKS, SMOKE_TASKS = 30, 6
BUDGET_MS = 50
DRAIN_WAIT_SECONDS = 75  # an idle runner's drain waits for its slots' parked claims (wait_seconds, 60)
EXIT_NOTHING_CLAIMABLE = 3  # agent.cli.output
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Bench Runner",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench Runner",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}


def stat_times(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of `pid` from `/proc/<pid>/stat`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS, (int(fields[13]) + int(fields[14])) / TICKS


def live_children(pid: int) -> list[int]:
    """The processes whose parent is `pid` now."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def agent_env() -> dict[str, str]:
    """The environment of the agent side: no server settings or agent variables of this process, git isolated."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("LEASEHOLD_", "DATABASE_URL", "GIT_", "DJANGO_"))
    }
    env.update(GIT_IDENTITY)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


def make_clone(root: Path) -> Path:
    clone = root / "project"
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", "init", "-q", "-b", "main", str(clone)], check=True, env=env)
    (clone / "README.md").write_text("# bench\n")
    subprocess.run(["git", "add", "README.md"], cwd=clone, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "initial commit"], cwd=clone, check=True, env=env)
    return clone


def _done(project: Any) -> int:
    from ledger.models import Task

    return Task.objects.filter(project=project, status="done").count()


def _wait_until(check: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


def _make_tasks(project: Any, count: int) -> None:
    from ledger.actors import SYSTEM
    from ledger.services import task_create

    for index in range(count):
        task_create(project=project, title=f"Runner task {index}", actor=SYSTEM, status="ready")


def _runner_run(server: http.Server, root: Path, tasks: int) -> dict[str, Any]:
    from bench.cycles import fresh_fleet
    from ledger.actors import SYSTEM
    from runners.services import runner_create

    fleet = fresh_fleet("runnercpu", agents=0, tasks=0)
    _, token = runner_create(name=f"bench-{fleet.project.slug}", projects=[fleet.project], slots=SLOTS, actor=SYSTEM)
    clone = make_clone(root / "runner")
    token_file = root / "runner.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = root / "runner.toml"
    config.write_text(
        f'server = "http://{server.host}:{server.port}"\ntoken_file = "{token_file}"\n'
        f'state_dir = "{root / "state"}"\n\n[projects.{fleet.project.slug}]\n'
        f'repository = "{clone}"\ncommand = ["true"]\n'
    )
    events = root / "runner-events.jsonl"
    with open(events, "wb") as out, open(root / "runner-stderr.txt", "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "agent", "--json", "runner", "--config", str(config)],
            env=agent_env(),
            cwd=root,
            stdout=out,
            stderr=err,
        )
    try:
        _wait_until(lambda: b'"registered"' in events.read_bytes(), timeout=60, what="the runner registered")
        time.sleep(3.0)  # every slot has parked its claim
        rest_own, rest_children = stat_times(process.pid)
        time.sleep(5.0)
        at_rest = sum(stat_times(process.pid)) - rest_own - rest_children
        own_before, children_before = stat_times(process.pid)
        started = time.monotonic()
        _make_tasks(fleet.project, tasks)
        _wait_until(lambda: _done(fleet.project) >= tasks, timeout=600, what=f"{tasks} tasks done by the runner")
        # The last `run` children report, exit and are reaped; the slots park again.
        _wait_until(
            lambda: not live_children(process.pid),
            timeout=30,
            what="every run child reaped",
        )
        elapsed = time.monotonic() - started
        own_after, children_after = stat_times(process.pid)
    except BaseException:
        process.kill()
        process.wait()
        raise
    process.send_signal(signal.SIGTERM)  # a drain; it exits once every slot's parked claim has answered
    return {
        "own": own_after - own_before,
        "children": children_after - children_before,
        "elapsed": elapsed,
        "at_rest_per_s": at_rest / 5.0,
        "process": process,
        "termed_at": time.monotonic(),
    }


def _drained(process: subprocess.Popen[bytes], termed_at: float, wait: float) -> tuple[int | None, float]:
    """The runner's exit status after SIGTERM and the seconds it took (None: killed after `wait` s)."""
    try:
        code: int | None = process.wait(timeout=max(0.1, termed_at + wait - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    return code, round(time.monotonic() - termed_at, 1)


def _loops_run(server: http.Server, root: Path, tasks: int) -> dict[str, Any]:
    from bench.cycles import fresh_fleet

    fleet = fresh_fleet("loopcpu", agents=0, tasks=0)
    agents = http.create_agents(fleet.project, SLOTS, prefix=f"{fleet.project.slug}-a")
    clone = make_clone(root / "loops")
    _make_tasks(fleet.project, tasks)
    url = f"http://{server.host}:{server.port}"
    runs: list[int] = []
    spent: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def loop(index: int, token: str) -> None:
        home = root / f"loop-{index}"
        home.mkdir()
        env = {**agent_env(), "XDG_CONFIG_HOME": str(home), "LEASEHOLD_URL": url, "LEASEHOLD_TOKEN": token}
        argv = [sys.executable, "-m", "agent", "run", "--next", "--project", fleet.project.slug]
        argv += ["--worktree", "--repo", str(clone), "--", "true"]
        errors = home / "stderr.txt"
        while True:
            with open(errors, "wb") as err:
                child = subprocess.Popen(argv, env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=err)
            # This child's CPU and its reaped descendants', exactly (a runner reaped meanwhile is not in it).
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = code = os.waitstatus_to_exitcode(status)
            with lock:
                runs.append(code)
                spent.append(usage.ru_utime + usage.ru_stime)
            if code == EXIT_NOTHING_CLAIMABLE:
                return
            if code != 0:
                with lock:
                    failures.append(f"run exited {code}: {errors.read_text(errors='replace')[-300:]!r}")
                if len(failures) > 5:
                    return

    started = time.monotonic()
    threads = [threading.Thread(target=loop, args=(i, token)) for i, (_, token) in enumerate(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "children": sum(spent),
        "elapsed": time.monotonic() - started,
        "runs": len(runs),
        "done": _done(fleet.project),
        "failures": failures,
    }


def runner_cpu(target: Target, sizes: Any) -> list[Row]:
    from bench.cycles import release_pool
    from bench.sizes import SMOKE

    tasks = SMOKE_TASKS if sizes is SMOKE else TASKS
    release_pool()
    with (
        tempfile.TemporaryDirectory(prefix="leasehold-bench-runner-") as home,
        http.serving(target, workers=2) as server,
    ):
        root = Path(home)
        runner = _runner_run(server, root, tasks)
        loops = _loops_run(server, root, tasks)  # meanwhile the runner drains
        code, drain_seconds = _drained(runner["process"], runner["termed_at"], DRAIN_WAIT_SECONDS)
    per_task = {name: round(1000 * runner[name] / tasks, 1) for name in ("own", "children")}
    tree = per_task["own"] + per_task["children"]
    loop_per_task = round(1000 * loops["children"] / max(1, loops["done"]), 1)
    runner_row = Row(
        database=target.vendor,
        workload=f"runners: a runner's CPU per task ({SLOTS} slots, command `true`)",
        mode="runner",
        concurrency=SLOTS,
        ops=tasks,
        seconds=round(runner["elapsed"], 1),
        throughput=round(tasks / runner["elapsed"], 2) if runner["elapsed"] else None,
        p50_ms=None,
        p99_ms=None,
        ratio=round(tree / loop_per_task, 2) if loop_per_task else None,
        errors=[] if code == 0 else [f"the runner did not drain in {DRAIN_WAIT_SECONDS} s: killed"],
        extra={
            "runner_cpu_ms_per_task": per_task["own"],
            "run_children_cpu_ms_per_task": per_task["children"],
            "tree_cpu_ms_per_task": round(tree, 1),
            "runner_at_rest_ms_per_s": round(1000 * runner["at_rest_per_s"], 2),
            "budget_ms": BUDGET_MS,
            "idle_drain_seconds": drain_seconds,
        },
    )
    loop_row = Row(
        database=target.vendor,
        workload=f"runners: a runner's CPU per task ({SLOTS} slots, command `true`)",
        mode="reference",
        concurrency=SLOTS,
        ops=loops["done"],
        seconds=round(loops["elapsed"], 1),
        throughput=round(loops["done"] / loops["elapsed"], 2) if loops["elapsed"] else None,
        p50_ms=None,
        p99_ms=None,
        errors=loops["failures"][:3] + ([] if loops["done"] == tasks else [f"{loops['done']} of {tasks} done"]),
        extra={"shell_loop_cpu_ms_per_task": loop_per_task, "run_processes": loops["runs"]},
    )
    return [runner_row, loop_row]
