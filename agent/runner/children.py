"""The runner's children: `python -m agent run …` per attempt, `python -m agent land --watch …` per landing slot.

- Each child leads a process group of its own (`start_new_session`): a Ctrl-C in the runner's terminal reaches
  the runner only, which drains; the runner decides when a child is told to stop.
- Each child gets `PR_SET_PDEATHSIG` = SIGTERM (Linux, `prctl` between fork and exec): when the runner dies,
  even by `kill -9`, the kernel sends the child SIGTERM; `run` passes it on to its command and hands the
  attempt off, so nothing works on without a lease keeper. The signal follows the *thread* that forked the
  child, so a child is always started by the slot thread that waits for it, and that thread outlives it.
- Environment: the runner's own, less every `LEASEHOLD_*` variable, plus the slot's `LEASEHOLD_URL` /
  `LEASEHOLD_TOKEN` (the slot agent's token; `run` withholds it from its command, SPEC §23.2) and the slot's
  `XDG_CONFIG_HOME` (its state files). The runner token never reaches a child.
- Output: a log file per child under the slot's directory; the runner's own log gets one line per event.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import agent

PR_SET_PDEATHSIG = 1
LOGS_KEPT = 200
# `leasehold: error: CODE: message`, as `agent.cli.output.Output.error` prints a refusal, and
# `leasehold: late report refused (CODE): message`, as `run` says a late report after a partition was refused.
_ERROR_LINE = re.compile(r"^leasehold: (?:error: ([A-Z_]+)|late report refused \(([A-Z_]+)\)): (.*)$")
# Where the toolkit's package lives: the child runs this same code (`python -m agent`).
PACKAGE_ROOT = str(Path(agent.__file__).resolve().parents[1])


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def _dies_with_runner() -> Callable[[], None] | None:
    """A `preexec_fn` that sets the parent-death signal; if the runner is already gone, the child stops itself."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return in_the_child


def child_environment(
    *, url: str, token: str, config_home: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The slot's environment for a child (see the module docstring)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("LEASEHOLD_")}
    paths = [PACKAGE_ROOT, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            "XDG_CONFIG_HOME": str(config_home),
            "LEASEHOLD_URL": url,
            "LEASEHOLD_TOKEN": token,
            **dict(extra or {}),
        }
    )
    return env


class Child:
    """One child process of a slot, its log file, and the signals the runner sent it."""

    def __init__(self, argv: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_dies_with_runner(),
            )
        self.terms_sent = 0
        prune_logs(log_path.parent)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.process.wait(timeout=timeout)
        return None

    def terminate(self) -> None:
        """SIGTERM to the child (`run` passes it on to its command's group and hands off; a lander stops)."""
        if self.process.poll() is None:
            self.terms_sent += 1
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the child's whole group (the last resort: its command has a death signal of its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def refusals(self) -> list[tuple[str, str]]:
        """(code, message) of each error line the child printed (a late report refused: STALE_EPOCH, …)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return [(match[1] or match[2], match[3]) for line in text.splitlines() if (match := _ERROR_LINE.match(line))]


def prune_logs(directory: Path, keep: int = LOGS_KEPT) -> None:
    """Keep the newest `keep` log files of a slot."""
    with contextlib.suppress(OSError):
        logs = sorted(directory.glob("*.log"), key=lambda path: path.stat().st_mtime)
        for old in logs[: max(0, len(logs) - keep)]:
            old.unlink(missing_ok=True)


def run_argv(*, repository: Path, command: list[str]) -> list[str]:
    """`python -m agent run --worktree --repo REPO -- COMMAND…`: the attempt is the one in the slot's state file.

    The worktree is `run`'s default (`<repo parent>/<repo name>.worktrees/<task key>`), so a successor on any
    slot of this machine takes over a crashed predecessor's worktree as §15.1 says.
    """
    return [sys.executable, "-m", "agent", "run", "--worktree", "--repo", str(repository), "--", *command]


def land_argv(*, repository: Path, project: str, lease_seconds: int | None) -> list[str]:
    """`python -m agent land --watch --repo REPO --project P`: the lander loop of §21.2, waiting with §25's wait."""
    argv = [sys.executable, "-m", "agent", "land", "--watch", "--repo", str(repository), "--project", project]
    if lease_seconds:
        argv += ["--lease-seconds", str(lease_seconds)]
    return argv
