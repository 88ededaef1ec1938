"""Batches with bisection (SPEC §21.3), real git: how many check runs find the failing tasks, and what lands."""

from __future__ import annotations

import pytest

from agent.land.engine import Engine
from tests.agent.gitrepos import git, git_env
from tests.agent.landing_repos import Landing, make_landing

# Red exactly when a poisoned file is in the tree: a task fails on its own, as bisection assumes.
CHECK = "! ls poison-* >/dev/null 2>&1 || { echo poisoned by: poison-*; exit 1; }"


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


def batch(landing: Landing, size: int, failing: set[int]):
    return [
        landing.deliver(f"AGT-{n}", {f"task-{n}.txt": f"{n}\n", **({f"poison-{n}": "x\n"} if n in failing else {})})
        for n in range(1, size + 1)
    ]


@pytest.mark.parametrize("position", range(1, 9))
def test_a_batch_of_8_with_one_failing_task_lands_7_in_4_or_5_check_runs(tmp_path, position):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, {position})

    result = Engine(landing.lander, landing.plan(tasks, check=CHECK)).run()

    outcomes = {task.key: task.outcome for task in result.tasks}
    assert outcomes.pop(f"AGT-{position}") == "check_failed"
    assert set(outcomes.values()) == {"landed"}
    assert result.result == "landed"
    # 1 + log2(8) = 4 when the last halving check is green (odd positions); one more otherwise, because only
    # a tree that was checked green lands (the lower bound is argued in agent.land.engine's docstring).
    assert result.check_runs == (4 if position % 2 else 5)
    failed = next(task for task in result.tasks if task.outcome == "check_failed")
    assert f"poison-{position}" in failed.output_tail
    tree = git(landing.remote, "ls-tree", "--name-only", "main").split()
    assert sorted(name for name in tree if name.startswith("task-")) == sorted(
        f"task-{n}.txt" for n in range(1, 9) if n != position
    )
    assert not [name for name in tree if name.startswith("poison-")]
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_a_green_batch_lands_with_one_check_and_one_push(tmp_path):
    landing = make_landing(tmp_path)
    before = landing.tip()
    tasks = batch(landing, 4, set())

    result = Engine(landing.lander, landing.plan(tasks, check=CHECK)).run()

    assert (result.result, result.check_runs) == ("landed", 1)
    assert git(landing.remote, "rev-list", "--count", "--merges", f"{before}..main") == "4"


@pytest.mark.parametrize("failing", [{2, 7}, {1, 2}, {3, 4, 5}, set(range(1, 9))])
def test_several_failing_tasks_are_all_found_and_only_a_green_tree_lands(tmp_path, failing):
    landing = make_landing(tmp_path)
    tasks = batch(landing, 8, failing)

    result = Engine(landing.lander, landing.plan(tasks, check=CHECK)).run()

    outcomes = {task.key: task.outcome for task in result.tasks}
    assert {key for key, outcome in outcomes.items() if outcome == "check_failed"} == {f"AGT-{n}" for n in failing}
    assert {key for key, outcome in outcomes.items() if outcome == "landed"} == {
        f"AGT-{n}" for n in range(1, 9) if n not in failing
    }
    tree = git(landing.remote, "ls-tree", "--name-only", "main").split()
    assert not [name for name in tree if name.startswith("poison-")]
    assert result.check_runs <= 1 + (len(failing) + 1) * (3 + 1), result.check_runs
