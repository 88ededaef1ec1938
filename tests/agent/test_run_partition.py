"""`leasehold run` across a network partition (SPEC §23.4), through a real TCP proxy to a live server.

The proxy sits between `run` (its config names the proxy) and the server;
`partition()` drops every connection and refuses new ones, `restore()` listens
again on the same port. The leases are real and short; where the server's
lease must have run out, the test expires it through the expiry service with
that process's clock moved to the lease's end (never by sleeping).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.output import EXIT_LEASE_LOST, EXIT_OK
from agent.client import LeaseholdClient
from tests.agent.gitrepos import git, make_repos
from tests.agent.live import REPO, LiveServer, agent_env, read_trace, state_files
from tests.agent.runners_live import TcpProxy, expire_on_the_server


class Run:
    """A `leasehold --json run` process whose stderr lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agent", "--json", "run", *args],
            env={**env, "PYTHONPATH": str(REPO)},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.stdout: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stdout_reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._stdout_reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        self.stdout.extend(self.process.stdout)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, text: str, *, seconds: float) -> float:
        """Until a stderr line contains `text`; the monotonic time it was seen."""
        deadline = time.monotonic() + seconds
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, f"no line with {text!r} in:\n{self.stderr}"
            assert self.process.poll() is None or self._reader.is_alive(), self.stderr
            time.sleep(0.02)
        return time.monotonic()

    def wait_for_file(self, path: Path, *, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not path.exists():
            assert time.monotonic() < deadline, f"{path.name} never appeared:\n{self.stderr}"
            assert self.process.poll() is None, self.stderr
            time.sleep(0.02)

    def result(self, *, seconds: float = 120) -> tuple[int, dict]:
        self.process.wait(timeout=seconds)
        self._reader.join(timeout=5)
        self._stdout_reader.join(timeout=5)
        stdout = "".join(self.stdout)
        return self.process.returncode, json.loads(stdout.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def proxy(fleet) -> Iterator[TcpProxy]:
    link = TcpProxy(fleet.server.port)
    yield link
    link.close()


@pytest.fixture
def through_proxy(fleet, proxy, tmp_path) -> dict[str, str]:
    """A `leasehold` environment of the fleet's agent whose config names the proxy, not the server."""
    env = agent_env(tmp_path / "agent")
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700, parents=True)
    config.write_text(json.dumps({"url": proxy.url, "token": fleet.token, "project": fleet.project}))
    config.chmod(0o600)
    return env


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()


def shell(server: LiveServer, *lines: str) -> str:
    return server.manage("shell", "-c", "\n".join(lines))


def shell_answer(server: LiveServer, *lines: str) -> str:
    """The last line `manage.py shell -c` printed (it may print a banner first)."""
    return shell(server, *lines).strip().splitlines()[-1]


def attempts_of(server: LiveServer, key: str) -> int:
    query = f"print(Attempt.objects.filter(task__key={key!r}).count())"
    return int(shell_answer(server, "from leases.models import Attempt", query))


def sleeper(started: Path, stopped: Path, *, commit_in: bool = False) -> str:
    """A command that (in its worktree, optionally) commits, says it started, then waits to be stopped."""
    commit = (
        "import subprocess\n"
        "open('work.txt', 'w').write('done during the partition\\n')\n"
        "subprocess.run(['git', 'add', 'work.txt'], check=True)\n"
        "subprocess.run(['git', 'commit', '-q', '-m', 'work'], check=True)\n"
        if commit_in
        else ""
    )
    return commit + textwrap.dedent(
        f"""
        import signal, sys, time
        def stop(signum, frame):
            open({str(stopped)!r}, "w").write(repr(time.monotonic()))
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open({str(started)!r}, "w").close()
        time.sleep(300)
        """
    )


def renewals_sent(env: dict[str, str]) -> int:
    return sum(line["path"].endswith("/renew/") for line in read_trace(Path(env["LEASEHOLD_TRACE"])))


def test_a_partition_shorter_than_the_lease_less_the_margin_costs_nothing(
    fleet, api, proxy, through_proxy, runs, tmp_path
):
    key = fleet.ready_task()
    started, go = tmp_path / "started", tmp_path / "go"
    child = (
        f"import os, time; open({str(started)!r}, 'w').close()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    # 30 s lease: renewals every 10 s, retried 5 s after a failure; a 2 s grace leaves the margin at 5 s,
    # so the command would be stopped 25 s after the last renewal that got through. The partition lasts
    # three failed renewals (about 20 s after that renewal), which used to be a lost lease.
    run = Run([key, "--lease-seconds", "30", "--grace-seconds", "2", "--", sys.executable, "-c", child],
              through_proxy, REPO)  # fmt: skip
    runs.append(run)
    run.wait_for_file(started)
    proxy.partition()
    cut_at = time.monotonic()
    before = renewals_sent(through_proxy)
    while renewals_sent(through_proxy) < before + 3:
        assert time.monotonic() - cut_at < 40, run.stderr
        assert run.process.poll() is None, run.stderr
        time.sleep(0.02)
    assert "command stopped" not in run.stderr
    proxy.restore()
    partition_seconds = time.monotonic() - cut_at
    run.wait_for_line("the server answers again", seconds=15)
    go.touch()
    code, result = run.result()

    assert code == EXIT_OK, run.stderr
    assert 10 < partition_seconds < 25
    assert any("the server cannot be reached" in line for line in run.lines)
    assert result["outcome"] == "done"
    assert api.attempt(result["attempt"])["status"] == "completed"
    assert api.task(key)["status"] == "done"
    assert attempts_of(fleet.server, key) == 1  # the same attempt went on: no second one
    assert "late report" not in run.stderr
    assert state_files(through_proxy) == []


def test_a_long_partition_stops_the_command_keeps_the_work_and_the_late_report_is_refused_after_a_new_claim(
    fleet, api, proxy, through_proxy, runs, tmp_path
):
    repos = make_repos(tmp_path / "git")
    key = fleet.ready_task()
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    # 10 s lease: renewals every 3 s, the margin 5 s: stopped about 4 s after the last renewal that got through.
    run = Run([key, "--worktree", "--lease-seconds", "10", "--grace-seconds", "2", "--",
               sys.executable, "-c", sleeper(started, stopped, commit_in=True)],
              through_proxy, repos.clone)  # fmt: skip
    runs.append(run)
    run.wait_for_file(started)
    held = json.loads(state_files(through_proxy)[0].read_text())
    attempt_id = int(held["attempt_id"])
    proxy.partition()
    cut_at = time.monotonic()
    stopped_line_at = run.wait_for_line("command stopped", seconds=20)
    assert stopped.exists()  # SIGTERM reached the command before its lease could run out anywhere
    assert stopped_line_at - cut_at < 10
    assert run.process.poll() is None  # `run` waits to report

    # The work is on the attempt's branch, in the kept worktree.
    attempt = api.attempt(attempt_id)
    branch, worktree = attempt["branch"], Path(attempt["worktree_path"])
    assert worktree.is_dir()
    assert (worktree / "work.txt").exists()
    head = git(worktree, "rev-parse", "HEAD")
    assert git(repos.clone, "rev-parse", f"refs/heads/{branch}") == head

    # Meanwhile the server's lease runs out and another agent claims the task: it takes over the branch.
    expire_on_the_server(fleet.server, attempt_id)
    other_token = fleet.server.create_agent(f"partition-{attempt_id}", project=fleet.project)
    with LeaseholdClient(fleet.server.url, other_token) as other:
        successor = other.claim(key, lease_seconds=60)
    assert successor.attempt["branch"] == branch

    proxy.restore()
    code, result = run.result()
    assert code == EXIT_LEASE_LOST, run.stderr
    refused = [line for line in run.lines if "late report refused" in line]
    assert len(refused) == 1, run.stderr
    assert "late report refused (STALE_EPOCH)" in refused[0]
    assert f"branch {branch} at {head[:12]}" in refused[0]
    assert result["late_report"] == "refused"
    assert result["late_report_code"] == "STALE_EPOCH"
    assert result["git"]["head_commit"] == head
    assert result["git"]["commits_ahead"] == 1
    assert api.attempt(attempt_id)["status"] == "expired"
    comments = api.comments(key)["results"]
    assert any(f"attempt {attempt_id} refused (STALE_EPOCH)" in comment["body"] for comment in comments), comments
    assert worktree.is_dir()
    assert git(repos.clone, "rev-parse", f"refs/heads/{branch}") == head
    assert state_files(through_proxy) == []


def test_a_long_partition_that_ends_while_the_server_still_holds_the_lease_lands_the_late_report(
    fleet, api, proxy, through_proxy, runs, tmp_path
):
    key = fleet.ready_task()
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    run = Run([key, "--lease-seconds", "10", "--grace-seconds", "2", "--",
               sys.executable, "-c", sleeper(started, stopped)],
              through_proxy, REPO)  # fmt: skip
    runs.append(run)
    run.wait_for_file(started)
    proxy.partition()
    run.wait_for_line("command stopped", seconds=20)
    proxy.restore()  # within the margin: the server still holds the lease
    code, result = run.result()

    assert code == EXIT_LEASE_LOST, run.stderr
    assert stopped.exists()
    assert any("late report landed" in line for line in run.lines), run.stderr
    assert result["late_report"] == "landed"
    assert result["outcome"] == "handoff"
    attempt = api.attempt(result["attempt"])
    assert attempt["status"] == "interrupted"
    assert "Stopped by leasehold run: the server could not be reached" in attempt["result_summary"]
    assert api.task(key)["status"] == "ready"
    assert attempts_of(fleet.server, key) == 1
    assert state_files(through_proxy) == []


def test_a_loss_the_server_states_after_a_partition_stops_the_command_at_once(
    fleet, api, proxy, through_proxy, runs, tmp_path
):
    key = fleet.ready_task()
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    # 30 s lease: renewals every 10 s, retried 5 s after a failure; the margin alone would let the
    # command run on until 25 s after the last renewal that got through.
    run = Run([key, "--lease-seconds", "30", "--grace-seconds", "2", "--",
               sys.executable, "-c", sleeper(started, stopped)],
              through_proxy, REPO)  # fmt: skip
    runs.append(run)
    run.wait_for_file(started)
    proxy.partition()
    run.wait_for_line("the server cannot be reached", seconds=30)
    fleet.server.force_release(key)  # revoked during the partition
    proxy.restore()
    restored_at = time.monotonic()
    code, result = run.result()

    assert code == EXIT_LEASE_LOST, run.stderr
    assert result["lease_lost"] is True
    assert "LEASE_NOT_HELD" in result["reason"]
    assert "partition" not in result
    # The first renewal after the partition heard the refusal: stopped at once, not at the margin.
    assert float(stopped.read_text()) - restored_at < 5 + 1.5  # at most one retry interval
    assert "late report" not in run.stderr
    assert api.attempt(result["attempt"])["status"] == "revoked"
