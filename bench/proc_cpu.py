"""CPU seconds of other processes, read from Linux `/proc/<pid>/stat` (utime + stime, in clock ticks).

- `process_cpu_seconds(root)`: a process and all its descendants, as they
  are now (the server: `manage.py serve`, the gunicorn master, its workers;
  the workers live for the whole run, so a delta over the run is theirs).
- `DatabaseCpu`: PostgreSQL's share of a run. Backends are processes named
  `postgres: <cluster>: <user> <database> ...` in their command line; those
  of the bench's database are sampled every `SAMPLE_SECONDS` from a thread,
  so a backend that ends during the run still counts up to its last sample
  (one that starts during the run counts from zero). The server's pool keeps
  its connections, so few come and go. Beside it, the whole cluster's delta
  (the postmaster's own and reaped children's times, plus every live child)
  is reported as an upper bound: it includes other databases' sessions and
  the cluster's background writers. For SQLite there is nothing to sample:
  its work is done inside the server's processes.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from bench.environment import Target

SAMPLE_SECONDS = 0.25
TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields after the command name (field 3 onwards), or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def process_cpu_seconds(root: int) -> float:
    """User + system CPU seconds used so far by `root` and every live process descended from it."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields is None:
            continue  # ended meanwhile
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    family, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in family]
        family.update(children)
        frontier += children
    return sum(times.get(pid, 0.0) for pid in family)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def backends(database: str) -> dict[int, float]:
    """The CPU seconds so far of every PostgreSQL backend connected to `database`."""
    found = {}
    for pid in _pids():
        line = _cmdline(pid)
        if line.startswith("postgres:") and f" {database} " in line:
            fields = _stat(pid)
            if fields is not None:
                found[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def cluster_cpu_seconds(postmaster: int) -> float:
    """The postmaster's own and its reaped children's CPU, plus every live child's."""
    fields = _stat(postmaster)
    if fields is None:
        return 0.0
    own = sum(int(value) for value in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
    return own + process_cpu_seconds(postmaster) - (int(fields[11]) + int(fields[12])) / TICKS


def postmaster_of(pids: list[int]) -> int | None:
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            return int(fields[1])
    return None


class DatabaseCpu:
    """PostgreSQL CPU over a run, from `start()` to `stop()`; nothing for SQLite."""

    def __init__(self, target: Target) -> None:
        self.database = target.env["DATABASE_URL"].rsplit("/", 1)[1] if target.is_postgres else None
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.postmaster: int | None = None
        self.cluster_before = 0.0

    def start(self) -> None:
        if self.database is None:
            return
        self.first = backends(self.database)
        self.last = dict(self.first)
        self.postmaster = postmaster_of(list(self.first))
        if self.postmaster is not None:
            self.cluster_before = cluster_cpu_seconds(self.postmaster)
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        assert self.database is not None
        while not self.stopping.wait(SAMPLE_SECONDS):
            self.last.update(backends(self.database))

    def stop(self) -> dict[str, Any]:
        if self.database is None or self.thread is None:
            return {}
        self.stopping.set()
        self.thread.join()
        now = backends(self.database)
        self.last.update(now)
        spent = sum(value - self.first.get(pid, 0.0) for pid, value in self.last.items())
        result: dict[str, Any] = {
            "backends_s": spent,
            "backends_seen": len(self.last),
            "backends_ended": len(set(self.last) - set(now)),
        }
        if self.postmaster is None:
            self.postmaster = postmaster_of(list(now))
        if self.postmaster is not None and self.first:
            result["cluster_s"] = cluster_cpu_seconds(self.postmaster) - self.cluster_before
        return result
