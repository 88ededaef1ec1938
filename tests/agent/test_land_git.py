"""The lander's engine with real git (SPEC §21.2): methods, conflicts, the check, the CAS push, moved targets."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from agent.land.engine import MAX_RESTARTS, Engine
from agent.land.git import LandTask
from tests.agent.gitrepos import git, git_env, trailers
from tests.agent.landing_repos import Landing, make_landing


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def landing(tmp_path, monkeypatch) -> Landing:
    # A temporary directory of this test's own: another lane's lander (CI runs the two databases at
    # once on one machine) makes its scratch directories in the shared one.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    return make_landing(tmp_path)


def scratch_dirs() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("leasehold-land-")}


def test_merge_lands_two_tasks_with_merge_commits_and_keeps_their_labels(landing):
    before = landing.tip()
    one = landing.deliver("AGT-1", {"one.txt": "one\n"}, commits=2)
    two = landing.deliver("AGT-2", {"two.txt": "two\n"})
    dirs = scratch_dirs()

    result = Engine(landing.lander, landing.plan([one, two])).run()

    assert result.result == "landed"
    assert [task.outcome for task in result.tasks] == ["landed", "landed"]
    assert result.landed_commit == landing.tip()
    assert git(landing.remote, "rev-list", "--count", "--merges", f"{before}..main") == "2"
    assert trailers(landing.remote, f"{before}..main").count("agt-1-a1") == 2
    assert "agt-2-a1" in trailers(landing.remote, f"{before}..main")
    assert result.check_runs == 0
    assert landing.worktrees() == [f"worktree {landing.lander}"]  # the scratch worktree is gone
    assert scratch_dirs() == dirs
    assert git(landing.lander, "for-each-ref", "refs/leasehold") == ""


def test_squash_makes_one_commit_per_task_carrying_its_label(landing):
    before = landing.tip()
    one = landing.deliver("AGT-1", {"one.txt": "one\n"}, commits=3)
    two = landing.deliver("AGT-2", {"two.txt": "two\n"})

    result = Engine(landing.lander, landing.plan([one, two], method="squash")).run()

    assert result.result == "landed"
    assert git(landing.remote, "rev-list", "--count", f"{before}..main") == "2"
    assert trailers(landing.remote, f"{before}..main") == ["agt-2-a1", "agt-1-a1"]
    assert git(landing.remote, "show", "main:one.txt") == "one\n2"


def test_rebase_replays_the_task_commits_and_fast_forwards(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"}, commits=2)
    outside = landing.push_to_main("other.txt", "other\n")  # the task's base is behind the tip now

    result = Engine(landing.lander, landing.plan([one], method="rebase")).run()

    assert result.result == "landed"
    assert git(landing.remote, "rev-list", "--count", "--merges", f"{outside}..main") == "0"
    assert trailers(landing.remote, f"{outside}..main") == ["agt-1-a1", "agt-1-a1"]
    assert git(landing.remote, "rev-parse", "main~2") == outside


def test_a_head_already_in_the_target_lands_without_a_merge(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    git(landing.repos.clone, "push", "-q", "origin", f"{one.head_commit}:refs/heads/main")  # merged by a forge

    result = Engine(landing.lander, landing.plan([one])).run()

    assert (result.result, result.tasks[0].outcome, result.landed_commit) == ("landed", "landed", one.head_commit)
    assert landing.tip() == one.head_commit


def test_a_conflict_with_the_target_names_the_paths_and_pushes_nothing(landing):
    one = landing.deliver("AGT-1", {"README.md": "mine\n", "new.txt": "x\n"})
    landing.push_to_main("README.md", "theirs\n")
    tip = landing.tip()

    result = Engine(landing.lander, landing.plan([one])).run()

    assert result.result == "conflict"
    assert result.tasks[0].outcome == "conflict"
    assert result.tasks[0].paths == ["README.md"]
    assert landing.tip() == tip
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_a_task_that_conflicts_only_with_the_batch_is_deferred(landing):
    one = landing.deliver("AGT-1", {"shared.txt": "one\n"})
    two = landing.deliver("AGT-2", {"shared.txt": "two\n"})
    three = landing.deliver("AGT-3", {"three.txt": "three\n"})

    result = Engine(landing.lander, landing.plan([one, two, three])).run()

    assert result.result == "landed"
    assert [(task.key, task.outcome) for task in result.tasks] == [
        ("AGT-1", "landed"),
        ("AGT-2", "deferred"),
        ("AGT-3", "landed"),
    ]
    assert result.tasks[1].paths == ["shared.txt"]
    assert git(landing.remote, "show", "main:shared.txt") == "one"


def test_a_missing_head_is_a_conflict_saying_so(landing):
    ghost = LandTask(key="AGT-9", branch="feature/agt-9", head_commit="a" * 40, title="ghost")

    result = Engine(landing.lander, landing.plan([ghost])).run()

    assert result.result == "conflict"
    assert "could not be fetched" in result.tasks[0].output_tail


def test_a_red_check_fails_the_task_with_the_tail_of_its_output(landing):
    one = landing.deliver("AGT-1", {"broken": "yes\n"})
    tip = landing.tip()
    check = "seq 1 5000; echo the-end-of-it; test ! -e broken"

    result = Engine(landing.lander, landing.plan([one], check=check)).run()

    assert result.result == "check_failed"
    assert result.check_runs == 1
    tail = result.tasks[0].output_tail
    assert tail.rstrip().endswith("the-end-of-it")
    assert 0 < len(tail) <= 16384
    assert "\n1\n" not in tail  # only the end of a long output
    assert landing.tip() == tip


def test_a_green_check_runs_in_the_candidate_tree(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})

    result = Engine(landing.lander, landing.plan([one], check='test "$(cat one.txt)" = one')).run()

    assert (result.result, result.check_runs) == ("landed", 1)


def test_a_check_past_its_timeout_is_red_and_its_whole_group_is_killed(landing, tmp_path):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    pid_file = tmp_path / "grandchild.pid"
    check = f"(sleep 300 & echo $! > {pid_file}; wait) ; sleep 300"

    started = time.monotonic()
    result = Engine(landing.lander, landing.plan([one], check=check, timeout=1)).run()

    assert time.monotonic() - started < 30
    assert result.result == "check_failed"
    assert "timed out" in result.tasks[0].output_tail
    grandchild = int(pid_file.read_text())
    assert not alive_after(grandchild, seconds=5)


def alive_after(pid: int, *, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.05)
    return True


def test_a_target_moved_before_the_push_is_never_overwritten_and_the_landing_retries_at_the_new_tip(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    outside: list[str] = []

    def someone_pushes(attempt: int) -> None:
        if attempt == 0:
            outside.append(landing.push_to_main("outside.txt", "outside\n"))

    result = Engine(landing.lander, landing.plan([one]), before_push=someone_pushes).run()

    assert result.result == "landed"
    assert result.tries == 2
    assert git(landing.remote, "rev-parse", "main^1") == outside[0]
    assert git(landing.remote, "show", "main:outside.txt") == "outside"


def test_a_target_that_keeps_moving_ends_target_moved_after_three_restarts(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    pushed: list[str] = []

    def always(attempt: int) -> None:
        pushed.append(landing.push_to_main(f"outside{attempt}.txt", "x\n"))

    result = Engine(landing.lander, landing.plan([one]), before_push=always).run()

    assert result.result == "target_moved"
    assert result.tasks[0].outcome == "target_moved"
    assert len(pushed) == MAX_RESTARTS + 1
    assert landing.tip() == pushed[-1]
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_a_local_repository_with_the_target_checked_out_moves_with_its_working_tree(tmp_path):
    landing = make_landing(tmp_path)
    repository = landing.repos.clone  # the agents' repository, `main` checked out
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    plan = landing.plan([one])
    plan = type(plan)(**{**plan.__dict__, "source": str(repository)})

    result = Engine(landing.lander, plan).run()

    assert result.result == "landed"
    assert git(repository, "rev-parse", "main") == result.landed_commit
    assert (repository / "one.txt").read_text() == "one\n"
    assert git(repository, "status", "--porcelain") == ""


def test_git_errors_are_one_line(tmp_path):
    landing = make_landing(tmp_path)
    plan = landing.plan([])
    plan = type(plan)(**{**plan.__dict__, "source": str(tmp_path / "nowhere")})
    from agent.land.git import LandGitError

    with pytest.raises(LandGitError) as failed:
        Engine(Path(landing.lander), plan).run()
    assert "\n" not in str(failed.value)
