"""`leasehold hook …` fed the JSON Claude Code sends its hooks on stdin (SPEC §15.3); a hook never fails the session."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.agent.live import REPO, free_port, leasehold, state_files

# The shapes Claude Code sends (hook input: the common fields, then the event's own).
SESSION_ID = "9b0e4c1a-3f5d-4e2b-8a77-1c2d3e4f5a6b"
COMMON = {
    "session_id": SESSION_ID,
    "transcript_path": f"/home/dev/.claude/projects/-work-web/{SESSION_ID}.jsonl",
    "permission_mode": "default",
}
SESSION_START = {**COMMON, "hook_event_name": "SessionStart", "source": "startup"}
PRE_COMPACT = {**COMMON, "hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""}
SESSION_END = {**COMMON, "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}


def hook(event: str, payload: dict | str, *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    text = payload if isinstance(payload, str) else json.dumps({**payload, "cwd": str(cwd)})
    return subprocess.run(
        [sys.executable, "-m", "agent", "hook", event],
        input=text,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def claimed(fleet, env: dict[str, str], **task_fields) -> dict:
    with fleet.client() as api:
        key = api.create_task(fleet.project, "Hooked task", status="ready", **task_fields)["key"]
    done = leasehold("--json", "claim", key, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_session_start_prints_the_held_attempts_context_as_markdown(fleet, logged_in, tmp_path):
    attempt = claimed(fleet, logged_in, description="Make the parser total.", acceptance_criteria="No crash.")
    assert leasehold("checkpoint", "Tokenizer done", "--next-step", "the parser", env=logged_in).returncode == 0
    done = hook("session-start", SESSION_START, env=logged_in, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stderr == ""
    text = done.stdout
    assert f"you hold {attempt['task']} (attempt {attempt['attempt']}" in text
    assert f"# {attempt['task']}: Hooked task" in text
    assert "status in_progress" in text
    for expected in ("## Description", "Make the parser total.", "## Acceptance criteria", "## Latest checkpoint"):
        assert expected in text
    assert "- the parser" in text
    assert f"Leasehold-Label: {attempt['label']}" in text


def test_session_start_stays_within_16_kb_and_says_what_was_cut(fleet, logged_in, tmp_path):
    claimed(fleet, logged_in, description="word " * 8000)
    done = hook("session-start", SESSION_START, env=logged_in, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.encode()) <= 16_000
    assert "--field description --offset" in done.stdout


def test_pre_compact_checkpoints_the_latest_progress_and_reminds_to_write_a_real_one(fleet, api, logged_in, tmp_path):
    attempt = claimed(fleet, logged_in)
    progress = leasehold("note", "Parser rewritten", "--next-step", "edge cases", "--next-step", "docs", env=logged_in)
    assert progress.returncode == 0, progress.stderr
    done = hook("pre-compact", PRE_COMPACT, env=logged_in, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Write a real checkpoint" in done.stdout
    context = api.context(attempt["task"])
    checkpoint = context["latest_checkpoint"]
    assert checkpoint["content"] == "context compacted; latest progress: Parser rewritten"
    assert checkpoint["next_steps"] == ["edge cases", "docs"]


def test_session_end_hands_the_attempt_off(fleet, api, logged_in, tmp_path):
    attempt = claimed(fleet, logged_in)
    done = hook("session-end", SESSION_END, env=logged_in, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "handed off" in done.stdout
    ended = api.attempt(attempt["attempt"])
    assert ended["status"] == "interrupted"
    assert ended["interruption_reason_code"] == "client_shutdown"
    assert "prompt_input_exit" in ended["result_summary"]
    assert state_files(logged_in) == []
    again = hook("session-end", SESSION_END, env=logged_in, cwd=tmp_path)  # nothing held any more: nothing to do
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_with_nothing_held_session_start_says_so_and_the_others_do_nothing(logged_in, tmp_path):
    start = hook("session-start", SESSION_START, env=logged_in, cwd=tmp_path)
    assert start.returncode == 0, start.stderr
    assert "no task is held here" in start.stdout
    for event, payload in (("pre-compact", PRE_COMPACT), ("session-end", SESSION_END)):
        done = hook(event, payload, env=logged_in, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), event


def test_a_payload_that_is_not_json_is_one_warning_line_and_exit_0(logged_in, tmp_path):
    for event in ("session-start", "pre-compact", "session-end"):
        for payload in ("this is not json", "[1, 2]"):
            done = hook(event, payload, env=logged_in, cwd=tmp_path)
            assert done.returncode == 0, event
            assert done.stdout == ""
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert "warning" in done.stderr
            assert "Traceback" not in done.stderr


def test_an_unreachable_server_or_no_login_is_one_warning_line_and_exit_0(fleet, logged_in, tmp_path):
    claimed(fleet, logged_in)
    config = Path(logged_in["LEASEHOLD_CONFIG"])
    login = json.loads(config.read_text())
    config.write_text(json.dumps({**login, "url": f"http://127.0.0.1:{free_port()}"}))
    nobody = {**logged_in, "LEASEHOLD_CONFIG": str(tmp_path / "nobody" / "config.json")}
    for env in (logged_in, nobody):
        for event, payload in (
            ("session-start", SESSION_START),
            ("pre-compact", PRE_COMPACT),
            ("session-end", SESSION_END),
        ):
            started = time.monotonic()
            done = hook(event, payload, env=env, cwd=tmp_path)
            assert done.returncode == 0, (event, done.stderr)
            assert done.stdout == ""
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert "Traceback" not in done.stderr
            assert time.monotonic() - started < 20


def test_session_end_records_where_the_work_is_before_handing_off(fleet, api, logged_in, tmp_path):
    attempt = claimed(fleet, logged_in)
    checkout = tmp_path / "checkout"
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(checkout)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "work"], check=True)
    (checkout / "unsaved.txt").write_text("not committed yet\n")
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    done = hook("session-end", SESSION_END, env=logged_in, cwd=checkout)
    assert done.returncode == 0, done.stderr
    assert "handed off" in done.stdout
    ended = api.attempt(attempt["attempt"])
    assert ended["status"] == "interrupted"
    facts = ended
    assert facts["head_commit"] == head
    assert facts["dirty"] is True
    assert facts["pushed"] is False
    assert facts["worktree_path"] == str(checkout.resolve())
