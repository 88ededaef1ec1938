"""The command dies with `leasehold run` (SPEC §15.3): `kill -9` of run → the command is gone within 2 s."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.cli.output import EXIT_USAGE
from tests.agent.live import REPO, leasehold

DEADLINE_SECONDS = 2.0
pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads process states from /proc")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_for(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.02)
    return path.read_text().strip()


def gone_within(pids: list[int], seconds: float) -> float:
    """Seconds until none of `pids` runs; fails past `seconds`."""
    started = time.monotonic()
    while any(alive(pid) for pid in pids):
        assert time.monotonic() - started < seconds, [pid for pid in pids if alive(pid)]
        time.sleep(0.01)
    return time.monotonic() - started


def family_command(tmp_path: Path) -> list[str]:
    """A shell with a child of its own: the death signal reaches only the shell, the watchdog the whole group."""
    script = f"echo $$ > {tmp_path}/child; sleep 300 & echo $! > {tmp_path}/grandchild; wait"
    return ["sh", "-c", script]


def test_kill_9_of_run_takes_the_command_and_its_children_within_2_seconds(fleet, api, logged_in, tmp_path):
    key = fleet.ready_task()
    run = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", key, "--lease-seconds", "3", "--", *family_command(tmp_path)],
        env=logged_in,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids = [int(wait_for(tmp_path / "child")), int(wait_for(tmp_path / "grandchild"))]
        assert all(alive(pid) for pid in pids)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        took = gone_within(pids, DEADLINE_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
        for name in ("child", "grandchild"):  # leave nothing behind when the test failed
            if (tmp_path / name).exists() and (tmp_path / name).read_text().strip():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)
    print(f"command gone {took:.3f} s after kill -9 of leasehold run")
    # Nobody works on the task any more; the lease lapses on its own and a late write is refused.
    deadline = time.monotonic() + 20
    while api.task(key)["holder"] is not None:  # the lease still runs
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.2)
    late = leasehold("note", "too late", env=logged_in)
    # The killed run's state file is doubtful (its process is gone); the server says the attempt ended,
    # so the CLI forgets it and sends nothing (issue 29: state that cannot lie).
    assert late.returncode == EXIT_USAGE, late.stderr
    assert "No current attempt" in late.stderr


GUARDED = textwrap.dedent(
    """
    import subprocess, sys, time
    from agent.workspace import supervise
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "watchdog-only":
        supervise._prctl = lambda: None  # as on a platform without PR_SET_PDEATHSIG
        supervise.Supervised(["sleep", "300"], env={"PATH": "/usr/bin:/bin"}, cwd=None, grace_seconds=5)
    else:  # the death signal alone, no watchdog
        subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=supervise._death_signal_setter())
    time.sleep(0.3)
    open(out, "w").write("started")
    time.sleep(300)
    """
)


@pytest.mark.parametrize("mode", ["watchdog-only", "death-signal-only"])
def test_each_guard_alone_stops_the_command(tmp_path, mode):
    marker = tmp_path / "started"
    supervisor = subprocess.Popen([sys.executable, "-c", GUARDED, mode, str(marker)], cwd=REPO)
    try:
        wait_for(marker)
        mine = [pid for pid in _sleepers() if _parent_chain_has(pid, supervisor.pid)]
        assert len(mine) == 1
        supervisor.kill()
        supervisor.wait()
        gone_within(mine, DEADLINE_SECONDS)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == b"sleep\x00300\x00":
                    found.append(int(entry.name))
    return found


def _parent_chain_has(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == ancestor:
            return True
    return False
