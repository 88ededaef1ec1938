"""State that cannot lie (issue 29): a state file whose attempt the server reports ended is removed at the next
CLI call, hook or `run`, and the SessionStart hook asks the server before it says "you hold" — against a live
server, with a `leasehold run` killed by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from agent.cli.output import EXIT_OK, EXIT_USAGE
from tests.agent.live import REPO, leasehold, state_files
from tests.agent.test_hooks import SESSION_START, hook


def killed_run(fleet, api, env: dict[str, str]) -> str:
    """A task claimed by `leasehold run`, which is then killed with SIGKILL (its state file stays behind)."""
    key = fleet.ready_task()
    run = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", key, "--lease-seconds", "60", "--", sys.executable, "-c",
         "import time; time.sleep(60)"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (state_files(env) and api.task(key)["effective_status"] == "in_progress"):
            assert run.poll() is None, "run exited before it held the task"
            assert time.monotonic() < deadline, "run never held the task"
            time.sleep(0.1)
        time.sleep(0.3)  # the command is started
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    assert len(state_files(env)) == 1  # the lie-to-be: a file for an attempt nobody keeps
    return key


def finished_by_someone_else(fleet, api, key: str) -> None:
    """An admin revokes the dead run's attempt; another attempt (epoch 2) finishes the task."""
    fleet.server.force_release(key)
    claim = api.claim(key)
    assert claim.lease.epoch >= 2
    api.finish(claim.lease, "done", result_summary="finished by the successor")


def test_after_a_killed_run_the_session_start_hook_never_says_you_hold_a_task_someone_else_finished(
    fleet, api, logged_in, tmp_path
):
    key = killed_run(fleet, api, logged_in)
    finished_by_someone_else(fleet, api, key)
    done = hook("session-start", SESSION_START, env=logged_in, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "you hold" not in done.stdout
    assert key not in done.stdout or "no task is held" in done.stdout.lower()
    assert state_files(logged_in) == []


def test_after_a_killed_run_the_next_claim_forgets_the_ended_attempt_instead_of_refusing(fleet, api, logged_in):
    key = killed_run(fleet, api, logged_in)
    finished_by_someone_else(fleet, api, key)
    other = fleet.ready_task()
    claimed = leasehold("--json", "claim", other, env=logged_in)
    assert claimed.returncode == EXIT_OK, claimed.stderr  # not "You hold …" for an ended attempt
    assert [path.stem for path in state_files(logged_in)] == [other]
    assert leasehold("release", env=logged_in).returncode == EXIT_OK


def test_a_live_attempt_of_a_killed_run_is_kept_until_the_server_says_it_ended(fleet, api, logged_in, tmp_path):
    key = killed_run(fleet, api, logged_in)
    # Its lease still runs on the server: the state is true, and the hook says so.
    done = hook("session-start", SESSION_START, env=logged_in, cwd=tmp_path)
    assert f"you hold {key}" in done.stdout, done.stdout + done.stderr
    assert len(state_files(logged_in)) == 1
    fleet.server.force_release(key)
    late = leasehold("note", "too late", env=logged_in)
    assert late.returncode == EXIT_USAGE, late.stderr  # no current attempt: the ended one is forgotten
    assert state_files(logged_in) == []
