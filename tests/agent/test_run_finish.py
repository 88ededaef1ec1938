"""How `leasehold run`'s finish gets through (issue 29): a server restart under it, a task changed during it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.output import EXIT_OK
from agent.client import LeaseholdClient
from tests.agent.live import REPO, LiveServer, agent_env, state_files


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def wait_for(path: Path, run: subprocess.Popen[str], *, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        assert run.poll() is None, run.communicate()
        time.sleep(0.05)


def child_waiting_for(started: Path, go: Path) -> str:
    """A command that says it started, then exits 0 once `go` exists."""
    return (
        f"import os, time; open({str(started)!r}, 'w').close()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )


def start_run(key: str, env: dict[str, str], child: str, *, lease_seconds: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "run", key, "--lease-seconds", lease_seconds,
         "--", sys.executable, "-c", child],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture
def own_server(tmp_path) -> Iterator[list[LiveServer]]:
    """A server of this test alone, first in the list; it is restarted under a running `run` (its twins follow)."""
    servers = [LiveServer(tmp_path / "server", on_suite_database=True).start()]
    try:
        yield servers
    finally:
        for server in reversed(servers):  # the first owns the database: it goes last
            server.stop()


def logged_in_to(server: LiveServer, home: Path, project: str) -> dict[str, str]:
    token = server.create_agent("restart-1", project=project)
    env = agent_env(home)
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700, parents=True)
    config.write_text(json.dumps({"url": server.url, "token": token, "project": project}))
    config.chmod(0o600)
    return env | {"TEST_TOKEN": token}


def test_a_finish_during_a_server_restart_is_sent_again_under_its_key_and_the_work_counts(own_server, tmp_path):
    server = own_server[0]
    server.manage("create_project", "rst", "--name", "Restart")
    env = logged_in_to(server, tmp_path / "agent", "rst")
    with LeaseholdClient(server.url, env["TEST_TOKEN"]) as api:
        key = str(api.create_task("rst", "Survive a restart", status="ready")["key"])
    started, go = tmp_path / "started", tmp_path / "go"
    run = start_run(key, env, child_waiting_for(started, go), lease_seconds="90")
    try:
        wait_for(started, run)
        assert server.process is not None
        os.killpg(server.process.pid, signal.SIGTERM)  # down: not stop(), which would drop its database
        server.process.wait(timeout=20)
        go.touch()  # the command ends while the server is down: the finish meets a refused connection
        time.sleep(6)  # longer than the client's own retries of one call (about 4 s)
        twin = LiveServer(server.data_dir, port=server.port, same_database_as=server)
        own_server.append(twin)
        twin.start()
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == EXIT_OK, stderr
    assert "trying again" in stderr
    result = last_json(stdout)
    assert result["outcome"] == "done"
    with LeaseholdClient(server.url, env["TEST_TOKEN"]) as api:
        assert api.attempt(result["attempt"])["status"] == "completed"
        assert api.task(key)["status"] == "done"
    assert state_files(env) == []


def test_run_finishes_a_task_changed_under_it_acknowledging_the_version_it_read_again(fleet, api, logged_in, tmp_path):
    key = fleet.ready_task()
    started, go = tmp_path / "started", tmp_path / "go"
    run = start_run(key, logged_in, child_waiting_for(started, go), lease_seconds="30")
    try:
        wait_for(started, run)
        task = api.task(key)
        changed = api.update_task(key, version=task["version"], changes={"description": "Also do the other thing."})
        go.touch()
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == EXIT_OK, stderr
    assert "was changed during the run (description)" in stderr
    result = last_json(stdout)
    assert result["outcome"] == "done"
    assert api.attempt(result["attempt"])["status"] == "completed"
    assert api.task(key)["status"] == "done"
    assert api.task(key)["version"] >= changed["version"]
    assert state_files(logged_in) == []
