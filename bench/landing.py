"""`--only landing` (SPEC §21.3, §24): batched against serial landing with a check of fixed duration T.

16 tasks are queued (each its own branch of a bare remote, one commit with its
`Leasehold-Label` trailer); one of them fails the check. The check is
`sleep T` and then red exactly when a task's poison file is in the tree, so
each run lasts T, and a task fails on its own (what bisection assumes).

- **batched** (`batch_max` 16): one landing of the 16 tasks: the check once on
  the whole candidate, then bisection until the failing task is isolated; the
  15 others land with one push. SPEC §24: ≤ 6·T of wall time.
- **batched x3**: the same landing with `parallel_checks` 3 (`leasehold land
  --parallel-checks 3`): the bisection's next probes of both outcomes are
  checked at once (`agent.land.speculate`); more check runs, fewer rounds.
  `LEASEHOLD_BENCH_LANDING_PARALLEL` sets the 3.
- **serial** (`batch_max` 1): 16 landings of one task each, in queue order:
  16 checks, 16 pushes (about 16·T).

It drives `agent.land.engine.Engine` directly against real git (a bare
remote, an agents' clone, a lander's clone under a temporary directory), as
`leasehold land` does once it holds a landing: fetch, a scratch worktree at
the target's tip, merges, the checks, the compare-and-swap push. The server
is not in it (it adds one claim, renewals every third of the lease, and one
finish per landing: milliseconds against T), so the figures are the same on
both databases; the rows carry the database of the run they were measured in.

Reported per mode: wall seconds, check runs (and speculative ones stopped),
wall ÷ T, merges built, the seconds spent in git processes (`git_s`: some of
them while a check runs) and wall - check runs·T (`outside_checks_s`: the
time outside the checks when they run one at a time); the batched rows' ratio is their wall time over the
serial row's. `LEASEHOLD_BENCH_LANDING_T` sets T (default 0.5 s; smoke 0.2 s) and
`LEASEHOLD_BENCH_LANDING_FAILING` the failing task's position (1 to 16; default
10, a position that needs the 6th check run: see the engine's docstring).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.land.engine import MAX_PARALLEL_CHECKS, Engine, LandingPlan, LandingResult
from agent.land.git import LandTask
from bench.environment import Target
from bench.results import Row
from bench.sizes import SMOKE, Sizes

TASKS = 16
BATCHED_BUDGET_T = 6
IDENTITY = {
    "GIT_AUTHOR_NAME": "Bench Agent",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench Agent",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


def _git_env() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env.update(IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    return env


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=_git_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Queue:
    remote: Path
    lander: Path
    tasks: list[LandTask]


def make_queue(root: Path, *, failing: int) -> Queue:
    """A bare remote with `main`, TASKS task branches off it (the `failing`-th poisoned), a lander's clone."""
    root.mkdir(parents=True)
    remote, agents, lander = root / "remote.git", root / "agents", root / "lander"
    _git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    _git(root, "clone", "-q", str(remote), str(agents))
    _git(agents, "checkout", "-q", "-b", "main")
    (agents / "README.md").write_text("# bench\n")
    _git(agents, "add", "README.md")
    _git(agents, "commit", "-q", "-m", "initial commit")
    _git(agents, "push", "-q", "origin", "main")
    tasks = []
    for number in range(1, TASKS + 1):
        key, branch = f"LB-{number}", f"feature/lb-{number}"
        _git(agents, "checkout", "-q", "-B", branch, "main")
        names = [f"task-{number}.txt"] + ([f"poison-{number}"] if number == failing else [])
        for name in names:
            (agents / name).write_text(f"{number}\n")
        _git(agents, "add", *names)
        _git(agents, "commit", "-q", "-m", f"{key}: work\n\nLeasehold-Label: bench/{branch}/{key}/1")
        tasks.append(
            LandTask(
                key=key,
                branch=branch,
                head_commit=_git(agents, "rev-parse", "HEAD"),
                title=f"Bench task {number}",
                label=f"bench/{branch}/{key}/1",
            )
        )
    _git(agents, "push", "-q", "origin", *[task.branch for task in tasks])
    _git(root, "clone", "-q", str(remote), str(lander))
    return Queue(remote=remote, lander=lander, tasks=tasks)


def _check_command(seconds: float) -> str:
    return f"sleep {seconds:g}; if ls poison-* >/dev/null 2>&1; then echo poisoned: poison-*; exit 1; fi"


def _plan(queue: Queue, tasks: list[LandTask], seconds: float) -> LandingPlan:
    return LandingPlan(
        source=str(queue.remote),
        target="main",
        method="merge",
        tasks=tasks,
        check_command=_check_command(seconds),
        check_timeout_seconds=60,
    )


def _land(queue: Queue, batch: int, seconds: float, parallel: int = 1) -> tuple[float, list[LandingResult]]:
    """Land the queue `batch` tasks at a time (failed tasks leave it, as they go back to `ready`); wall seconds."""
    results: list[LandingResult] = []
    started = time.perf_counter()
    for first in range(0, len(queue.tasks), batch):
        plan = _plan(queue, queue.tasks[first : first + batch], seconds)
        results.append(Engine(queue.lander, plan, parallel_checks=parallel).run())
    return time.perf_counter() - started, results


def _row(target: Target, mode: str, wall: float, results: list[LandingResult], seconds: float, failing: int) -> Row:
    outcomes: dict[str, int] = {}
    for result in results:
        for task in result.tasks:
            outcomes[task.outcome] = outcomes.get(task.outcome, 0) + 1
    check_runs = sum(result.check_runs for result in results)
    errors = [] if outcomes == {"landed": TASKS - 1, "check_failed": 1} else [f"unexpected outcomes {outcomes}"]
    return Row(
        database=target.vendor,
        workload=f"landing: {TASKS} queued, 1 failing, check T={seconds:g} s",
        mode=mode,
        concurrency=1,
        ops=TASKS,
        seconds=round(wall, 3),
        throughput=round(TASKS / wall, 2),
        p50_ms=None,
        p99_ms=None,
        outcomes=outcomes,
        errors=errors,
        extra={
            "check_runs": check_runs,
            "checks_stopped": sum(result.checks_cancelled for result in results),
            "wall_over_T": round(wall / seconds, 2),
            "merges": sum(result.merges for result in results),
            "git_s": round(sum(result.git_seconds for result in results), 2),
            "outside_checks_s": round(wall - check_runs * seconds, 2),
            "landings": len(results),
            "failing_position": failing,
            "engine": "agent.land.engine, real git, no server",
        },
    )


def landing(target: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    seconds = float(os.environ.get("LEASEHOLD_BENCH_LANDING_T") or (0.2 if sizes is SMOKE else 0.5))
    failing = int(os.environ.get("LEASEHOLD_BENCH_LANDING_FAILING") or 10)
    if not 1 <= failing <= TASKS:
        raise ValueError(f"LEASEHOLD_BENCH_LANDING_FAILING must be 1 to {TASKS}, not {failing}")
    parallel = int(os.environ.get("LEASEHOLD_BENCH_LANDING_PARALLEL") or 3)
    if not 2 <= parallel <= MAX_PARALLEL_CHECKS:
        raise ValueError(f"LEASEHOLD_BENCH_LANDING_PARALLEL must be 2 to {MAX_PARALLEL_CHECKS}, not {parallel}")
    root = Path(tempfile.mkdtemp(prefix="leasehold-bench-landing-"))
    try:
        batched_wall, batched = _land(make_queue(root / "batched", failing=failing), TASKS, seconds)
        wide_wall, wide = _land(make_queue(root / "wide", failing=failing), TASKS, seconds, parallel)
        serial_wall, serial = _land(make_queue(root / "serial", failing=failing), 1, seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    batched_row = _row(target, "batched", batched_wall, batched, seconds, failing)
    wide_row = _row(target, f"batched x{parallel}", wide_wall, wide, seconds, failing)
    serial_row = _row(target, "serial", serial_wall, serial, seconds, failing)
    for row, wall in ((batched_row, batched_wall), (wide_row, wide_wall)):
        row.ratio = round(wall / serial_wall, 3)
        row.extra["budget_wall_over_T"] = BATCHED_BUDGET_T
    wide_row.extra["parallel_checks"] = parallel
    return [batched_row, wide_row, serial_row], {}
