"""The command dies with its supervisor (SPEC §15.3): two guards, so nothing works on a task without a lease.

1. On Linux the command's process gets `PR_SET_PDEATHSIG` = SIGTERM (set by
   `prctl` in the child between fork and exec): the kernel signals it the
   moment `leasehold run` dies, `kill -9` included. If `run` died before the
   call took effect, the child notices (its parent changed) and stops itself.
2. A watchdog, for every platform and for the command's own children (the
   death signal reaches only the direct child): a tiny Python process in a
   session of its own that blocks reading a pipe whose only writer is `run`.
   When `run` ends cleanly it writes one byte and the watchdog exits; when
   `run` disappears the read ends (EOF) and the watchdog sends SIGTERM to
   the command's whole process group, then SIGKILL after the grace period.

The command runs in a process group of its own (`start_new_session`), so
signals meant for it reach its children too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

PR_SET_PDEATHSIG = 1
_CLEAN_EXIT = b"x"

WATCHDOG = r"""
import os, signal, sys, time
fd, pgid, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
try:
    said = os.read(fd, 1)
except OSError:
    said = b""
if said == b"x":
    sys.exit(0)
def alive():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
try:
    os.killpg(pgid, signal.SIGTERM)
except ProcessLookupError:
    sys.exit(0)
deadline = time.monotonic() + grace
while alive() and time.monotonic() < deadline:
    time.sleep(0.05)
if alive():
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def _death_signal_setter() -> Callable[[], None] | None:
    """A `preexec_fn` that asks the kernel for SIGTERM when the parent dies (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent is already gone: the signal would never come
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


class Supervised:
    """COMMAND in its own process group, with the death signal and the watchdog."""

    def __init__(self, command: list[str], *, env: Mapping[str, str], cwd: Path | None, grace_seconds: float) -> None:
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            command, env=dict(env), cwd=cwd, start_new_session=True, preexec_fn=_death_signal_setter()
        )
        self._watch_write: int | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None
        read_end, write_end = os.pipe()
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WATCHDOG, str(read_end), str(self.process.pid), str(grace_seconds)],
                pass_fds=(read_end,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._watch_write = write_end
        except OSError:
            os.close(write_end)  # no watchdog: the death signal alone guards (said in `run`'s output)
        finally:
            os.close(read_end)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def stop(self, *, grace_seconds: float, term_sent: bool = False) -> int:
        """SIGTERM to the group (unless sent), SIGKILL after the grace period; the command's exit status."""
        return stop_child(self.process, grace_seconds=grace_seconds, term_sent=term_sent)

    def release_watchdog(self) -> None:
        """`run` is ending on its own terms: the watchdog leaves the group alone."""
        if self._watch_write is not None:
            with contextlib.suppress(OSError):
                os.write(self._watch_write, _CLEAN_EXIT)
            os.close(self._watch_write)
            self._watch_write = None
        if self.watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog.wait(timeout=5)


def stop_child(child: subprocess.Popen[bytes], *, grace_seconds: float, term_sent: bool = False) -> int:
    """SIGTERM to the child's process group (unless sent), SIGKILL after the grace period; its exit status."""
    if not term_sent:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGTERM)
    try:
        return child.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        return child.wait()
