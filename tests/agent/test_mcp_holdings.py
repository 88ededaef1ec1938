"""`leasehold mcp` keeps its attempts in the agent's state files (SPEC §15.3): taken back after a restart,
handed off when the session ends cleanly, kept with `--keep-on-exit`, shared with the CLI.

Real processes: the official SDK client over stdio, a live server.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio

from tests.agent.live import leasehold, state_files
from tests.agent.mcp_client import Session, with_session


def held_state(env: dict[str, str]) -> dict:
    [path] = state_files(env)
    return json.loads(path.read_text())


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still alive")


def test_a_restarted_mcp_server_takes_its_task_back_and_is_never_refused_by_itself(fleet, api, logged_in):
    key = fleet.ready_task()

    async def crash(session: Session) -> dict:
        claimed = await session.json("claim", {"key": key, "lease_seconds": 3})
        await session.json("checkpoint", {"content": "halfway", "next_steps": ["tests"]})
        stored = held_state(logged_in)
        os.kill(stored["pid"], signal.SIGKILL)  # Claude Code restarting a dead server
        wait_gone(stored["pid"])
        return {"claimed": claimed, "stored": stored}

    first = anyio.run(lambda: with_session(logged_in, crash, crash_ok=True))
    claimed, stored = first["claimed"], first["stored"]
    assert stored["owner"] == "mcp"
    assert stored["task"] == key
    assert stored["attempt_id"] == claimed["attempt"]
    assert claimed["attempt"] not in (None, 0)

    async def resume(session: Session) -> dict:
        seen: dict = {"again": await session.call("claim", {"key": key})}
        seen["stored"] = held_state(logged_in)
        await anyio.sleep(3.5)  # longer than the lease: the new server renews it
        seen["note"] = await session.call("note", {"content": "still mine"})
        seen["finish"] = await session.json("finish", {"summary": "resumed after a restart"})
        return seen

    seen = anyio.run(lambda: with_session(logged_in, resume))
    failed, text = seen["again"]
    assert not failed, text
    assert "TASK_TAKEN" not in text
    again = json.loads(text)
    assert again["attempt"] == claimed["attempt"]
    assert again["already_held"] is True
    assert again["context"]["latest_checkpoint"]["content"] == "halfway"
    assert seen["stored"]["pid"] != stored["pid"]  # the new server keeps it now
    assert not seen["note"][0], seen["note"][1]
    assert seen["finish"]["status"] == "completed"
    attempt = api.attempt(claimed["attempt"])
    assert attempt["status"] == "completed"
    assert attempt["epoch"] == claimed["epoch"]  # one attempt all along
    assert state_files(logged_in) == []


def test_a_clean_end_of_the_session_hands_the_attempt_off(fleet, api, logged_in):
    key = fleet.ready_task()

    async def work(session: Session) -> dict:
        return await session.json("claim", {"key": key})

    claimed = anyio.run(lambda: with_session(logged_in, work))  # the client closes stdin: a clean end
    attempt = api.attempt(claimed["attempt"])
    assert attempt["status"] == "interrupted"
    assert attempt["interruption_reason_code"] == "client_shutdown"
    assert state_files(logged_in) == []
    assert api.task(key)["effective_status"] == "ready"


def test_keep_on_exit_leaves_the_attempt_to_the_next_server(fleet, api, logged_in):
    key = fleet.ready_task()

    async def first(session: Session) -> dict:
        return await session.json("claim", {"key": key})

    claimed = anyio.run(lambda: with_session(logged_in, first, "--keep-on-exit"))
    assert api.attempt(claimed["attempt"])["status"] == "active"
    assert held_state(logged_in)["attempt_id"] == claimed["attempt"]

    async def second(session: Session) -> dict:
        return await session.json("checkpoint", {"content": "picked up where I was"})  # no claim: taken back

    written = anyio.run(lambda: with_session(logged_in, second))
    assert written["note"]
    attempt = api.attempt(claimed["attempt"])
    assert attempt["status"] == "interrupted"  # the second server was not --keep-on-exit
    assert [note["excerpt"] for note in attempt["notes"]] == ["picked up where I was"]


def test_the_cli_in_a_shell_acts_on_the_mcp_servers_attempt(fleet, api, logged_in):
    key = fleet.ready_task()

    async def work(session: Session) -> dict:
        claimed = await session.json("claim", {"key": key})
        shell = await anyio.to_thread.run_sync(
            lambda: leasehold("checkpoint", "written from the shell", "--next-step", "review", env=logged_in)
        )
        context = await anyio.to_thread.run_sync(lambda: leasehold("context", env=logged_in))
        seen = await session.json("context", {})
        return {"claimed": claimed, "shell": shell, "context": context, "seen": seen}

    result = anyio.run(lambda: with_session(logged_in, work))
    assert result["shell"].returncode == 0, result["shell"].stderr
    assert "No current attempt" not in result["shell"].stderr
    assert result["context"].returncode == 0, result["context"].stderr
    assert f"{key}: " in result["context"].stdout
    assert "[in_progress]" in result["context"].stdout  # the effective status, not the stored `ready`
    assert f"Attempt {result['claimed']['attempt']}" in result["context"].stdout
    assert result["seen"]["latest_checkpoint"]["content"] == "written from the shell"


def test_claiming_a_task_held_from_a_shell_takes_that_attempt_over(fleet, api, logged_in):
    key = fleet.ready_task()
    claimed = leasehold("--json", "claim", key, env=logged_in)
    assert claimed.returncode == 0, claimed.stderr
    attempt_id = json.loads(claimed.stdout)["attempt"]

    async def work(session: Session) -> tuple[bool, str]:
        return await session.call("claim", {"key": key})

    failed, text = anyio.run(lambda: with_session(logged_in, work, "--keep-on-exit"))
    assert not failed, text
    assert json.loads(text)["attempt"] == attempt_id
    assert held_state(logged_in)["owner"] == "mcp"


def process_gone(pid: int) -> bool:
    """Exited (a zombie not yet reaped by the SDK client counts as exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def test_sigterm_from_the_client_hands_off_and_the_server_exits_at_once(fleet, api, logged_in):
    key = fleet.ready_task()

    async def work(session: Session) -> dict:
        claimed = await session.json("claim", {"key": key})
        pid = held_state(logged_in)["pid"]
        os.kill(pid, signal.SIGTERM)  # the MCP stdio shutdown's second step (stdin still open)
        started = time.monotonic()
        while not process_gone(pid) and time.monotonic() - started < 10:
            await anyio.sleep(0.02)
        return {**claimed, "exited_in": time.monotonic() - started}

    claimed = anyio.run(lambda: with_session(logged_in, work, crash_ok=True))
    assert claimed["exited_in"] < 2.0
    attempt = api.attempt(claimed["attempt"])
    assert attempt["status"] == "interrupted"
    assert attempt["interruption_reason_code"] == "client_shutdown"
