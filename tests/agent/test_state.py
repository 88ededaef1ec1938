"""The attempts' state files (SPEC §15.3): per agent and per attempt, 0600, atomic, locked; worktree pointers."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.cli.output import EXIT_OK, EXIT_USAGE
from agent.workspace import state
from agent.workspace.state import AmbiguousAttempt, HeldAttempt
from tests.agent.live import REPO, leasehold, state_files


def held(agent: str = "agent-a", task: str = "AGT-1", *, attempt_id: int = 1, epoch: int = 1, **fields) -> HeldAttempt:
    return HeldAttempt(
        server="http://127.0.0.1:1",
        agent=agent,
        task=task,
        attempt_id=attempt_id,
        epoch=epoch,
        lease_token=f"lh_secret-{attempt_id}",
        lease_expires_at="2999-01-01T00:00:00Z",
        renew_every_seconds=100,
        label=f"owner={agent};branch=-;env=-;task={task};epoch={epoch}",
        **fields,
    )


def test_a_state_file_per_agent_per_attempt_private_and_atomic(tmp_path):
    path = state.save(tmp_path, held())
    assert path == tmp_path / "attempts" / "agent-a" / "AGT-1.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    state.save(tmp_path, held("agent-b"))
    state.save(tmp_path, held("agent-a", "AGT-2", attempt_id=2))
    assert [item.task for item in state.held_by(tmp_path, "agent-a")] == ["AGT-1", "AGT-2"]
    assert [item.task for item in state.held_by(tmp_path, "agent-b")] == ["AGT-1"]
    assert state.load(tmp_path, "agent-a", "AGT-1") == held()
    assert "lh_secret" not in repr(held())
    # No temporary file is left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", "AGT-1.json", "AGT-2.json"]

    state.remove(tmp_path, "agent-a", "AGT-1", attempt_id=99)  # another attempt's: kept
    assert state.load(tmp_path, "agent-a", "AGT-1") is not None
    state.remove(tmp_path, "agent-a", "AGT-1", attempt_id=1)
    assert state.load(tmp_path, "agent-a", "AGT-1") is None


def test_an_older_attempt_never_replaces_a_newer_one_of_the_same_task(tmp_path):
    newer = held(attempt_id=7, epoch=3)
    state.save(tmp_path, newer)
    old = held(attempt_id=5, epoch=2)
    state.save(tmp_path, old)
    state.mark_lost(tmp_path, old, "renewal refused")
    assert state.load(tmp_path, "agent-a", "AGT-1") == newer


def test_names_that_could_escape_the_directory_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot name a state file"):
        state.save(tmp_path, held(task="../../config"))
    with pytest.raises(ValueError, match="cannot name a state file"):
        state.attempts_dir(tmp_path, "../x")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_current_prefers_the_run_then_the_worktree_pointer_then_the_only_attempt(tmp_path, monkeypatch):
    monkeypatch.delenv("LEASEHOLD_RUN", raising=False)
    monkeypatch.delenv("LEASEHOLD_TASK", raising=False)
    config = tmp_path / "config"
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "root", cwd=repo)
    worktree = tmp_path / "wt"
    git("worktree", "add", "-q", "-b", "feature/agt-2", str(worktree), cwd=repo)

    assert state.current(config, "agent-a", repo) is None
    state.save(config, held(task="AGT-1", attempt_id=1))
    assert state.current(config, "agent-a", repo).task == "AGT-1"
    state.save(config, held(task="AGT-2", attempt_id=2, worktree=str(worktree)))
    with pytest.raises(AmbiguousAttempt, match="--task KEY"):
        state.current(config, "agent-a", repo)

    state.write_worktree_pointer(worktree, agent="agent-a", task="AGT-2", attempt_id=2)
    pointer = Path(git("rev-parse", "--absolute-git-dir", cwd=worktree)) / state.POINTER_NAME
    assert json.loads(pointer.read_text())["attempt_id"] == 2
    assert not (worktree / state.POINTER_NAME).exists()  # in the git directory, never in the work tree
    (worktree / "src").mkdir()
    assert state.current(config, "agent-a", worktree / "src").task == "AGT-2"
    assert state.current(config, "agent-b", worktree) is None  # another agent's pointer says nothing to agent-b

    monkeypatch.setenv("LEASEHOLD_RUN", "1")
    monkeypatch.setenv("LEASEHOLD_TASK", "AGT-1")
    assert state.current(config, "agent-a", worktree).task == "AGT-1"

    monkeypatch.delenv("LEASEHOLD_RUN")
    state.mark_lost(config, state.load(config, "agent-a", "AGT-2"), "expired")
    assert state.current(config, "agent-a", repo).task == "AGT-1"  # the only live one


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agent.workspace import state
    from tests.agent.test_state import held
    config, agent, task, go = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.001)
    for renewal in range(300):
        state.save(config, held(agent, task, attempt_id=sum(map(ord, agent + task)), renew_attempts=renewal))
        other = state.load(config, agent, task)
        assert other is not None and other.agent == agent, other
    """
)


def test_two_processes_sharing_one_config_directory_never_overwrite_each_others_state(tmp_path):
    config = tmp_path / "config"
    go = tmp_path / "go"
    writers = [("agent-a", "AGT-1"), ("agent-b", "AGT-1"), ("agent-a", "AGT-2")]
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(config), agent, task, str(go)], cwd=REPO)
        for agent, task in writers
    ]
    time.sleep(0.5)
    go.touch()
    assert [process.wait(timeout=120) for process in processes] == [0, 0, 0]
    for agent, task in writers:
        found = state.load(config, agent, task)
        assert found is not None
        assert (found.agent, found.task, found.renew_attempts) == (agent, task, 299)
    leftovers = [path.name for path in (config / "attempts").rglob("*") if path.name.endswith(".tmp")]
    assert leftovers == []


def test_two_agents_sharing_one_config_directory_hold_their_own_attempts(fleet, api, logged_in):
    second_token = fleet.server.create_agent("toolkit-state-2", project=fleet.project)
    first_env = logged_in
    second_env = {**logged_in, "LEASEHOLD_TOKEN": second_token}
    first_key, second_key = fleet.ready_task(), fleet.ready_task()
    claims = [
        subprocess.Popen(
            [sys.executable, "-m", "agent", "--json", "claim", key],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key, env in ((first_key, first_env), (second_key, second_env))
    ]
    answers = [claim.communicate(timeout=60) for claim in claims]
    assert [claim.returncode for claim in claims] == [EXIT_OK, EXIT_OK], answers
    assert [path.relative_to(path.parents[1]).as_posix() for path in state_files(logged_in)] == sorted(
        [f"toolkit-1/{first_key}.json", f"toolkit-state-2/{second_key}.json"]
    )

    assert leasehold("checkpoint", "first agent's work", env=first_env).returncode == EXIT_OK
    assert leasehold("checkpoint", "second agent's work", env=second_env).returncode == EXIT_OK
    assert api.context(first_key)["latest_checkpoint"]["content"] == "first agent's work"
    assert api.context(second_key)["latest_checkpoint"]["content"] == "second agent's work"

    # A second plain claim by the first agent is refused: nothing held is silently forgotten.
    assert leasehold("claim", fleet.ready_task(), env=first_env).returncode == EXIT_USAGE
    assert leasehold("finish", "--summary", "done", env=first_env).returncode == EXIT_OK
    assert [path.name for path in state_files(logged_in)] == [f"{second_key}.json"]
    assert api.task(second_key)["holder"] == "toolkit-state-2"
    assert leasehold("release", env=second_env).returncode == EXIT_OK
    assert state_files(logged_in) == []


def test_replace_hands_the_old_attempt_back_instead_of_forgetting_it(fleet, api, logged_in):
    first, second = fleet.ready_task(), fleet.ready_task()
    claimed = leasehold("--json", "claim", first, env=logged_in)
    assert claimed.returncode == EXIT_OK, claimed.stderr
    old_attempt = json.loads(claimed.stdout)["attempt"]
    assert leasehold("claim", second, "--replace", env=logged_in).returncode == EXIT_OK
    assert api.attempt(old_attempt)["status"] == "released"
    assert [path.name for path in state_files(logged_in)] == [f"{second}.json"]
