"""The project's check command in the candidate tree (SPEC §21.2 step 3).

The command runs through the shell in the scratch worktree, in a session and
process group of its own, stdout and stderr together into one pipe of which
the last `TAIL_CHARACTERS` are kept. It ends:

- by itself: green on exit 0, red otherwise;
- at its timeout: SIGTERM to the whole group, SIGKILL after `grace_seconds`;
  red, and the tail says it timed out;
- when `cancel` is set (the lease is lost, the lander was told to stop): the
  group is stopped the same way; the run counts as neither green nor red.

Whatever way it ends, the group gets a SIGKILL afterwards, so nothing the
check started in the background outlives it. The lander's token is not in its
environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TAIL_CHARACTERS = 16384
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class CheckRun:
    green: bool
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    output_tail: str
    seconds: float


class _Tail:
    """The last `limit` characters read from a pipe, read in a thread."""

    def __init__(self, stream: object, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.thread = threading.Thread(target=self._read, args=(stream,), name="land-check-output", daemon=True)
        self.thread.start()

    def _read(self, stream: object) -> None:
        read = stream.read1  # type: ignore[attr-defined]
        while chunk := read(65536):
            self.data += chunk
            if len(self.data) > 4 * self.limit:
                del self.data[: -4 * self.limit]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")[-self.limit :]


def run_check(
    command: str,
    *,
    cwd: Path,
    timeout_seconds: float,
    env: dict[str, str],
    cancel: threading.Event | None = None,
    grace_seconds: float = 5.0,
) -> CheckRun:
    """Run `command` in `cwd`: green or red, with the tail of its output; see the module docstring."""
    started = time.monotonic()
    # The check command is a shell command by definition (SPEC §21.1: e.g. `make test`), set by the project.
    process = subprocess.Popen(  # noqa: S602
        command,
        shell=True,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tail = _Tail(process.stdout, TAIL_CHARACTERS)
    deadline = started + timeout_seconds
    timed_out = cancelled = False
    while process.poll() is None:
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(POLL_SECONDS)
    if timed_out or cancelled:
        _stop_group(process, grace_seconds)
    _kill_group(process.pid)  # what the check left running in the background goes with it
    tail.thread.join(timeout=grace_seconds)
    if process.stdout is not None:
        process.stdout.close()
    code = process.wait()
    output = tail.text()
    if timed_out:
        note = f"\n[leasehold: the check timed out after {timeout_seconds:g} s; its process group was stopped]\n"
        output = (output + note)[-TAIL_CHARACTERS:]
    green = code == 0 and not timed_out and not cancelled
    return CheckRun(green, code, timed_out, cancelled, output, time.monotonic() - started)


def _stop_group(process: subprocess.Popen[bytes], grace_seconds: float) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_seconds)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
