"""`leasehold run -- COMMAND` end to end, against a live server process."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import textwrap
import time

from agent.cli.output import EXIT_COMMAND_FAILED, EXIT_LEASE_LOST, EXIT_OK, EXIT_USAGE
from agent.workspace.supervise import stop_child
from tests.agent.live import REPO, leasehold, read_trace, state_files

LEASE_SECONDS = "3"  # the server renews-every a third of it: one second
RENEW_EVERY_SECONDS = 1.0


def wait_for_refusal(server, prefix: str) -> list[tuple[str, str, int]]:
    """The access log of `prefix` once its refusal is written (gunicorn logs just after answering)."""
    deadline = time.monotonic() + 5
    while not any(status == 409 for _, _, status in server.access_log(prefix)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.access_log(prefix, method="POST")


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_run_keeps_the_lease_across_renewals_and_finishes_done_on_exit_0(fleet, api, logged_in, tmp_path):
    key = fleet.ready_task()
    seen_env = tmp_path / "child-env.json"
    child = textwrap.dedent(
        f"""
        import json, os, subprocess, sys, time
        json.dump(dict(os.environ), open({str(seen_env)!r}, "w"))
        subprocess.run([sys.executable, "-m", "agent", "checkpoint", "halfway there", "--next-step", "finish"],
                       check=True, cwd={str(REPO)!r})
        time.sleep(4)
        """
    )
    done = leasehold(
        "--json", "run", key, "--lease-seconds", LEASE_SECONDS, "--", sys.executable, "-c", child, env=logged_in
    )
    assert done.returncode == EXIT_OK, done.stderr
    result = last_json(done.stdout)
    assert result["outcome"] == "done"
    assert result["lease_lost"] is False
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "completed"
    # A 3 s lease outlived by a 4 s command: only renewals kept it alive.
    assert attempt["renew_count"] >= 3
    assert api.task(key)["status"] == "done"
    # The command wrote through the same attempt (state file), and never saw the token.
    context = api.context(key)
    assert context["latest_checkpoint"]["content"] == "halfway there"
    child_env = json.loads(seen_env.read_text())
    assert child_env["LEASEHOLD_TASK"] == key
    assert child_env["LEASEHOLD_ATTEMPT_ID"] == str(result["attempt"])
    assert state_files(logged_in) == []  # finished: the attempt is forgotten
    renewals = [line for line in read_trace(tmp_path / "trace.jsonl") if line["path"].endswith("/renew/")]
    assert len(renewals) >= 3
    assert any(line["path"] == "/api/v1/agents/me/heartbeat/" for line in read_trace(tmp_path / "trace.jsonl"))
    gaps = [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(renewals)]
    assert all(0.5 <= gap <= 2.5 for gap in gaps), gaps


def test_run_finishes_failed_on_a_non_zero_exit(fleet, api, logged_in):
    key = fleet.ready_task(task_class="run-fails")
    done = leasehold(
        "--json", "run", "--next", "--task-class", "run-fails", "--lease-seconds", LEASE_SECONDS,
        "--", sys.executable, "-c", "import sys; sys.exit(1)",
        env=logged_in,
    )  # fmt: skip
    assert done.returncode == EXIT_COMMAND_FAILED, done.stderr
    result = last_json(done.stdout)
    assert result["task"] == key
    assert result["outcome"] == "failed"
    assert result["command_status"] == 1
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "failed"
    assert attempt["failure_reason_code"] == "implementation_error"
    assert "exited 1" in attempt["result_summary"]
    assert api.task(key)["status"] == "ready"  # free for the next agent


def test_a_force_release_stops_the_command_within_one_renew_interval_and_the_token_goes_quiet(
    fleet, api, logged_in, tmp_path
):
    key = fleet.ready_task()
    marker = tmp_path / "sigterm-at"
    child = textwrap.dedent(
        f"""
        import signal, sys, time
        def stop(signum, frame):
            open({str(marker)!r}, "w").write(repr(time.time()))
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        time.sleep(60)
        """
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "run", key, "--lease-seconds", LEASE_SECONDS,
         "--", sys.executable, "-c", child],
        env=logged_in, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    try:
        deadline = time.monotonic() + 30
        while not any(line["path"].endswith("/renew/") for line in read_trace(trace)):
            assert time.monotonic() < deadline, "no renewal was sent"
            assert run.poll() is None, run.communicate()
            time.sleep(0.1)
        fleet.server.force_release(key)
        revoked_by = time.time()
        stdout, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == EXIT_LEASE_LOST, stderr
    result = last_json(stdout)
    assert result["lease_lost"] is True
    assert "LEASE_NOT_HELD" in result["reason"]
    # SIGTERM reached the command within one renew interval (plus a little latency).
    assert marker.exists()
    assert float(marker.read_text()) - revoked_by <= RENEW_EVERY_SECONDS + 0.75

    attempt_id = result["attempt"]
    assert api.attempt(attempt_id)["status"] == "revoked"
    # The server saw the holder's requests (every POST under the attempt carries the token)
    # succeed up to one refusal, and nothing after it.
    holder_requests = wait_for_refusal(fleet.server, f"/api/v1/attempts/{attempt_id}/")
    statuses = [status for _, _, status in holder_requests]
    assert statuses[-1] == 409
    assert all(status < 300 for status in statuses[:-1])
    with_token = [line for line in read_trace(trace) if line["lease"]]
    assert len(with_token) == len(holder_requests)
    assert len({line["lease"] for line in with_token}) == 1

    # The server said the attempt ended: its state file is gone, and a later holder command has nothing to
    # act on; it sends no request with the token.
    assert state_files(logged_in) == []
    sent_before = len(read_trace(trace))
    late = leasehold("note", "too late", env=logged_in)
    assert late.returncode == EXIT_USAGE
    assert len(read_trace(trace)) == sent_before
    assert fleet.server.access_log(f"/api/v1/attempts/{attempt_id}/", method="POST") == holder_requests


def test_run_without_a_key_reuses_the_attempt_claimed_before(fleet, api, logged_in):
    key = fleet.ready_task()
    claimed = leasehold("--json", "claim", key, "--lease-seconds", LEASE_SECONDS, env=logged_in)
    assert claimed.returncode == EXIT_OK, claimed.stderr
    attempt_id = json.loads(claimed.stdout)["attempt"]
    done = leasehold("--json", "run", "--", sys.executable, "-c", "print('work')", env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    assert last_json(done.stdout)["attempt"] == attempt_id
    assert api.attempt(attempt_id)["status"] == "completed"


def test_ctrl_c_is_passed_to_the_command_and_the_attempt_is_handed_off(fleet, api, logged_in, tmp_path):
    key = fleet.ready_task()
    started = tmp_path / "started"
    child = f"import time; open({str(started)!r}, 'w').close(); time.sleep(60)"
    run = subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "run", key, "--lease-seconds", LEASE_SECONDS,
         "--", sys.executable, "-c", child],
        env=logged_in, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGINT, stderr
    result = last_json(stdout)
    assert result["outcome"] == "handoff"
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "interrupted"
    assert attempt["interruption_reason_code"] == "user_request"
    assert api.task(key)["status"] == "ready"


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, "-c",
         f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open({str(ready)!r}, 'w').close(); "
         "time.sleep(60)"],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
        status = stop_child(child, grace_seconds=0.5)
    finally:
        if child.poll() is None:
            child.kill()
    assert status == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 5
