"""The command dies with its supervisor (SPEC §15.3): two guards, so nothing works on a task without a lease.

COMMAND runs in a session and process group of its own (`start_new_session`:
no terminal signal reaches it behind `run`'s back, and `run` passes signals on
to the whole group).

1. A watchdog, for every platform and for the command's own children: a tiny
   Python process, started before COMMAND, that blocks reading a pipe whose
   only writer is `run`. COMMAND's process writes its pid (its group) into
   that pipe between fork and exec, so the watchdog knows the group before
   COMMAND's first instruction, whenever `run` may die. When `run` ends
   cleanly it writes one more byte and the watchdog exits; when `run`
   disappears (`kill -9`, an OOM kill) the read ends (EOF) and the watchdog
   sends SIGTERM to the group, then SIGKILL after the grace period.
2. On Linux, COMMAND's own process also gets `PR_SET_PDEATHSIG` = SIGTERM
   (`prctl` between fork and exec): the kernel signals it the moment `run`
   dies. If `run` died before the call took effect, the child notices (its
   parent changed) and stops itself.
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
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(number, signal.SIG_IGN)
fd, grace = int(sys.argv[1]), float(sys.argv[2])
said = b""
while True:
    try:
        chunk = os.read(fd, 64)
    except OSError:
        chunk = b""
    if not chunk:
        break
    said += chunk
    if b"\n" in said and said.split(b"\n", 1)[1]:
        sys.exit(0)  # run ended on its own terms
pgid = said.split(b"\n", 1)[0]
if not pgid.isdigit():
    sys.exit(0)  # run died before the command existed
pgid = int(pgid)
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


def _death_signal_setter(watchdog_fd: int | None = None) -> Callable[[], None] | None:
    """A `preexec_fn`: the death signal (Linux), and the child's pid told to the watchdog; None if neither applies."""
    prctl = _prctl()
    if prctl is None and watchdog_fd is None:
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        if watchdog_fd is not None:
            with contextlib.suppress(OSError):
                os.write(watchdog_fd, f"{os.getpid()}\n".encode())
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the parent is already gone: the signal would never come
                os.kill(os.getpid(), signal.SIGTERM)

    return in_the_child


class Supervised:
    """COMMAND in a process group of its own, guarded by the watchdog and the death signal."""

    def __init__(self, command: list[str], *, env: Mapping[str, str], cwd: Path | None, grace_seconds: float) -> None:
        self._watch_write: int | None = None
        self.watchdog = self._start_watchdog(grace_seconds)
        try:
            self.process: subprocess.Popen[bytes] = subprocess.Popen(
                command,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_death_signal_setter(self._watch_write),
            )
        except OSError:
            self.release_watchdog()
            raise
        self.pgid = self.process.pid

    def _start_watchdog(self, grace_seconds: float) -> subprocess.Popen[bytes] | None:
        read_end, write_end = os.pipe()
        try:
            watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WATCHDOG, str(read_end), str(grace_seconds)],
                pass_fds=(read_end,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            os.close(write_end)
            return None
        finally:
            os.close(read_end)
        self._watch_write = write_end
        return watchdog

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def stop(self, *, grace_seconds: float, term_sent: bool = False) -> int:
        """SIGTERM to the group (unless sent), SIGKILL after the grace period; the command's exit status."""
        return stop_child(self.process, grace_seconds=grace_seconds, term_sent=term_sent, pgid=self.pgid)

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


def stop_child(
    child: subprocess.Popen[bytes], *, grace_seconds: float, term_sent: bool = False, pgid: int | None = None
) -> int:
    """SIGTERM to the child's process group (unless sent), SIGKILL after the grace period; its exit status.

    `pgid` defaults to the child's pid (a child that leads its own group). The
    SIGKILL goes to the group too; a watchdog leading it would die with it,
    which is only right: the command is being stopped for good.
    """
    group = pgid if pgid is not None else child.pid
    if not term_sent:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    try:
        return child.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        return child.wait()
