"""The command dies with its supervisor (SPEC §15.3): two guards, so nothing works on a task without a lease.

1. A watchdog, for every platform and for the command's own children: a tiny
   Python process, started first, that leads a new process group (in `run`'s
   session) and ignores the signals meant for the command. COMMAND is then
   started inside that group, so from its first instruction it and everything
   it forks belong to a group the watchdog knows. The watchdog blocks reading
   a pipe whose only writer is `run`: when `run` ends cleanly it writes one
   byte and the watchdog exits; when `run` disappears (`kill -9`, an OOM
   kill) the read ends (EOF) and the watchdog sends SIGTERM to the group,
   then SIGKILL after the grace period.
2. On Linux, COMMAND's own process also gets `PR_SET_PDEATHSIG` = SIGTERM
   (set by `prctl` in the child between fork and exec): the kernel signals it
   the moment `run` dies. If `run` died before the call took effect, the child
   notices (its parent changed) and stops itself.

Signals `run` passes on go to the whole group (the watchdog ignores them).
Without a watchdog (it could not start) COMMAND gets a session of its own and
the death signal alone guards it.
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
me = os.getpid()
try:
    said = os.read(fd, 1)
except OSError:
    said = b""
if said == b"x":
    sys.exit(0)
def others_alive():
    if not os.path.isdir("/proc"):
        return True  # cannot tell here: wait out the grace period
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == me and fields[0] not in ("Z", "X"):
            return True
    return False
os.killpg(me, signal.SIGTERM)
deadline = time.monotonic() + grace
while others_alive() and time.monotonic() < deadline:
    time.sleep(0.05)
if others_alive():
    os.killpg(me, signal.SIGKILL)
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
    """COMMAND in the watchdog's process group, with the death signal."""

    def __init__(self, command: list[str], *, env: Mapping[str, str], cwd: Path | None, grace_seconds: float) -> None:
        self._watch_write: int | None = None
        self.watchdog = self._start_watchdog(grace_seconds)
        try:
            self.process: subprocess.Popen[bytes] = subprocess.Popen(
                command,
                env=dict(env),
                cwd=cwd,
                preexec_fn=_death_signal_setter(),
                process_group=self.watchdog.pid if self.watchdog is not None else None,
                start_new_session=self.watchdog is None,
            )
        except OSError:
            self.release_watchdog()
            raise
        self.pgid = self.watchdog.pid if self.watchdog is not None else self.process.pid

    def _start_watchdog(self, grace_seconds: float) -> subprocess.Popen[bytes] | None:
        read_end, write_end = os.pipe()
        try:
            watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WATCHDOG, str(read_end), str(grace_seconds)],
                pass_fds=(read_end,),
                process_group=0,
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
