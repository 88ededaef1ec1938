"""The landing's git work (issue 39): candidates built once and reused, merges without a worktree,
speculative probes (`parallel_checks`). Real git, no server."""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import pytest

from agent.cli.land_commands import _parallel_checks
from agent.land.engine import Abandoned, Chains, Engine
from agent.land.git import Git, LandTask, Merger, Scratch, git_environment
from tests.agent.gitrepos import git, git_env
from tests.agent.landing_repos import Landing, make_landing


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


def batch(landing: Landing, size: int, failing: set[int]) -> list[LandTask]:
    return [
        landing.deliver(f"AGT-{n}", {f"task-{n}.txt": f"{n}\n", **({f"poison-{n}": "x\n"} if n in failing else {})})
        for n in range(1, size + 1)
    ]


def chains_of(landing: Landing) -> tuple[Chains, Scratch, str]:
    clone = Git(landing.lander, git_environment(landing.lander))
    git(landing.lander, "fetch", "-q", "origin")
    tip = git(landing.lander, "rev-parse", "origin/main")
    scratch = Scratch(clone)
    return Chains(Merger(clone, scratch), tip, "merge", lambda: None), scratch, tip


def recording_check(log: Path, *, seconds: float = 0.0) -> str:
    """A check that logs `start`/`end` (`stop` when stopped), the commit it ran on and its verdict; red on poison."""
    return (
        f'trap "echo stop \\$\\$ >> {log}; exit 143" TERM; echo "start $$" >> {log}; sleep {seconds:g}; '
        f"if ls poison-* >/dev/null 2>&1; then v=red; else v=green; fi; "
        f'echo "end $$ $(git rev-parse HEAD) $v" >> {log}; test $v = green'
    )


def checked(log: Path) -> dict[str, str]:
    """commit → verdict, for every check that ran to its end (a check stopped while it wrote its `end` line,
    its `git rev-parse` killed under it, left the line without a commit: it did not run to its end)."""
    ends = [line.split() for line in log.read_text().splitlines() if line.startswith("end ")]
    return {fields[2]: fields[3] for fields in ends if len(fields) == 4}


def test_a_probe_that_is_a_prefix_of_the_batch_reuses_its_commits_and_merges_nothing(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, set())
    chains, scratch, tip = chains_of(landing)
    with scratch:
        whole = chains.build(tasks)
        assert chains.merges == 8
        assert whole is not None
        assert git(landing.lander, "rev-list", "--count", "--merges", f"{tip}..{whole}") == "8"

        prefix = chains.build(tasks[:5])
        assert chains.merges == 8  # nothing merged again
        assert prefix == git(landing.lander, "rev-parse", f"{whole}~3")  # the chain's own 5th commit

        again = chains.build(tasks)
        assert (again, chains.merges) == (whole, 8)


def test_a_probe_merges_only_the_tasks_after_its_longest_prefix_already_built(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, set())
    chains, scratch, tip = chains_of(landing)
    with scratch:
        chains.build(tasks)
        probe = [*tasks[:4], *tasks[6:]]  # everything but 5 and 6: starts from the chain's 4th commit
        built = chains.build(probe)
        assert chains.merges == 8 + 2
        assert built is not None
        assert git(landing.lander, "rev-parse", f"{built}~2") == chains.build(tasks[:4])
        names = git(landing.lander, "ls-tree", "--name-only", built).split()
        assert sorted(name for name in names if name.startswith("task-")) == sorted(
            f"task-{n}.txt" for n in (1, 2, 3, 4, 7, 8)
        )
        suffix = chains.build(tasks[4:])  # nothing in common with the tip's chain: from the tip
        assert chains.merges == 8 + 2 + 4
        assert git(landing.lander, "rev-parse", f"{suffix}~4") == tip
        assert not scratch.made  # merges by `merge` never needed a worktree


def test_merges_are_merge_commits_of_the_task_heads_with_the_lander_message(tmp_path):
    landing = make_landing(tmp_path)
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    chains, scratch, tip = chains_of(landing)
    with scratch:
        commit = chains.build([one])
    assert commit is not None
    assert git(landing.lander, "rev-parse", f"{commit}^1", f"{commit}^2").split() == [tip, one.head_commit]
    message = git(landing.lander, "log", "-1", "--format=%B", commit)
    assert message == f"Merge AGT-1: Task AGT-1\n\nBranch {one.branch} at {one.head_commit}."


def test_a_conflict_names_its_paths_and_is_remembered_as_not_buildable(tmp_path):
    landing = make_landing(tmp_path)
    one = landing.deliver("AGT-1", {"shared.txt": "one\n"})
    two = landing.deliver("AGT-2", {"shared.txt": "two\n"})
    chains, scratch, _ = chains_of(landing)
    with scratch:
        assert chains.build([one]) is not None
        done = chains.extend(("AGT-1",), two)
        assert (done.ok, done.paths) == (False, ["shared.txt"])
        merges = chains.merges
        assert chains.build([one, two]) is None
        assert chains.merges == merges  # known not buildable: not tried again


@pytest.mark.parametrize("parallel", [1, 3])
@pytest.mark.parametrize("failing", [{6}, {3}, {2, 7}])
def test_what_lands_is_exactly_a_commit_that_was_checked_green(tmp_path, parallel, failing):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, failing)
    log = tmp_path / "checks.log"

    result = Engine(landing.lander, landing.plan(tasks, check=recording_check(log)), parallel_checks=parallel).run()

    outcomes = {task.key: task.outcome for task in result.tasks}
    assert {key for key, outcome in outcomes.items() if outcome == "check_failed"} == {f"AGT-{n}" for n in failing}
    assert result.result == "landed"
    assert result.landed_commit == landing.tip()
    assert checked(log)[str(result.landed_commit)] == "green"
    # Every check that ended is counted: as a run, or as stopped when it ended just as the engine stopped it.
    assert result.check_runs + result.checks_cancelled >= len(checked(log))
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_one_check_at_a_time_by_default_the_same_runs_as_ever(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, {6})
    log = tmp_path / "checks.log"

    result = Engine(landing.lander, landing.plan(tasks, check=recording_check(log, seconds=0.2))).run()

    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "end"] * 5  # never two at once
    assert (result.check_runs, result.checks_cancelled) == (5, 0)


def test_parallel_checks_run_probes_at_once_never_more_than_asked_and_land_the_same(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 16, {10})
    log = tmp_path / "checks.log"

    result = Engine(
        landing.lander, landing.plan(tasks, check=recording_check(log, seconds=0.5)), parallel_checks=3
    ).run()

    at_once = widest = 0
    for line in log.read_text().splitlines():
        at_once += 1 if line.startswith("start ") else -1
        widest = max(widest, at_once)
    assert 2 <= widest <= 3
    assert [task.key for task in result.tasks if task.outcome != "landed"] == ["AGT-10"]
    assert checked(log)[str(result.landed_commit)] == "green"
    tree = git(landing.remote, "ls-tree", "--name-only", "main").split()
    assert sorted(name for name in tree if name.startswith("task-")) == sorted(
        f"task-{n}.txt" for n in range(1, 17) if n != 10
    )
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_stopped_speculative_checks_leave_no_process_behind(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, {5})
    pids = tmp_path / "pids"
    # Green candidates end at once; red ones take long: the probes of the outcome that did not happen are stopped.
    check = f"echo $$ >> {pids}; if ls poison-* >/dev/null 2>&1; then sleep 3; exit 1; fi"

    result = Engine(landing.lander, landing.plan(tasks, check=check), parallel_checks=3).run()

    assert [task.key for task in result.tasks if task.outcome != "landed"] == ["AGT-5"]
    for pid in {int(line) for line in pids.read_text().split()}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_a_stop_during_speculative_checks_abandons_without_pushing(tmp_path):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, {5})
    tip = landing.tip()
    cancel = threading.Event()
    started = tmp_path / "started"
    check = f"touch {started}; sleep 30"

    def stop_soon() -> None:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cancel.set()

    stopper = threading.Thread(target=stop_soon)
    stopper.start()
    with pytest.raises(Abandoned):
        Engine(landing.lander, landing.plan(tasks, check=check), cancel=cancel, parallel_checks=3).run()
    stopper.join()
    assert landing.tip() == tip
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_parallel_checks_is_bounded():
    assert _parallel_checks("3") == 3
    for bad in ("0", "9", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _parallel_checks(bad)
    with pytest.raises(ValueError, match="parallel_checks"):
        Engine(Path("."), _plan(), parallel_checks=0)


def _plan():
    from agent.land.engine import LandingPlan

    return LandingPlan(source=".", target="main", method="merge", tasks=[])
