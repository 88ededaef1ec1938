"""Whole-machine CPU over a run, read from `/proc`, split by who spent it (SPEC §20, the MCP path).

Every process's `utime + stime` (and `cutime + cstime`, its reaped children)
comes from `/proc/<pid>/stat`, in clock ticks (`SC_CLK_TCK`). A snapshot is
taken when the run starts and when it ends, and the process table is sampled
in between so that a process which exits mid-run is not lost. The groups:

- `clients`: the load generator's processes (excluded from the total);
- `mcp`: the descendants of the client processes, the `leasehold mcp`
  servers (and anything they start, such as `git`);
- `web`: `manage.py serve` and its descendants, the gunicorn master and
  workers;
- `db`: the PostgreSQL processes serving the run's database: every process
  whose `comm` is `postgres` and whose title names that database (client
  backends, and autovacuum workers on it). Backends are reaped by the
  postmaster, not by a process of the run, so each is counted from its own
  ticks, up to the last sample it was seen in;
- `db_shared`: PostgreSQL's own processes (postmaster, checkpointer,
  background and WAL writers, launchers): they serve every database of the
  machine, so they are reported beside the total, not in it;
- `machine`: the busy ticks of `/proc/stat` (everything, every session on
  the machine), for how loaded the machine was.

A tree group (`clients`, `mcp`, `web`) counts `utime + stime + cutime + cstime`
of the members alive at the end: a member that exited was reaped by its
parent, a member too, whose `cutime` then holds it; nothing is counted twice.
On SQLite the database is in the web workers' processes: `db` is empty.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")
SAMPLE_SECONDS = 0.25
TREE_GROUPS = ("clients", "mcp", "web")
BACKEND_GROUPS = ("db", "db_shared")


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    comm: str
    title: str  # /proc/<pid>/cmdline, NULs as spaces (PostgreSQL sets its process title there)
    own_ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime: its children that have exited and been reaped


def read_processes() -> dict[int, Process]:
    table: dict[int, Process] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # it exited while we read
            continue
        # The command name is in parentheses and may hold spaces: the fields follow the last ')'.
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17.
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        pid = int(entry.name)
        table[pid] = Process(pid, int(fields[1]), comm, title, utime + stime, cutime + cstime)
    return table


def machine_busy_ticks() -> int:
    """Busy ticks of all CPUs since boot (`/proc/stat`: everything but idle and iowait)."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return user + nice + system + irq + softirq + steal


def _descendants(table: dict[int, Process], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for process in table.values():
        children.setdefault(process.ppid, []).append(process.pid)
    found: set[int] = set()
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


@dataclass
class Groups:
    """Who is who: the load generator's pids, the web server's pid and the database's name (None: SQLite)."""

    client_pids: set[int]
    web_pid: int
    database: str | None

    def classify(self, table: dict[int, Process]) -> dict[str, set[int]]:
        mcp = _descendants(table, self.client_pids)
        web = {self.web_pid, *_descendants(table, {self.web_pid})} & set(table)
        groups: dict[str, set[int]] = {
            "clients": self.client_pids & set(table),
            "mcp": mcp - self.client_pids,
            "web": web,
            "db": set(),
            "db_shared": set(),
        }
        if self.database is None:
            return groups
        for process in table.values():
            if process.comm != "postgres":
                continue
            words = process.title.split()
            if self.database in words:
                groups["db"].add(process.pid)
            elif not any(word.endswith(")") and "(" in word for word in words):
                groups["db_shared"].add(process.pid)  # no client address in the title: one of PostgreSQL's own
        return groups


@dataclass
class CpuMeter:
    """Snapshot at `start()`, sample every SAMPLE_SECONDS on a thread, snapshot at `stop()`."""

    groups: Groups
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)
    members: dict[str, set[int]] = field(default_factory=dict)
    machine_ticks: int = 0
    _stopping: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def _value(self, process: Process, group: str) -> int:
        if group in TREE_GROUPS:
            return process.own_ticks + process.child_ticks
        return process.own_ticks  # a backend's parent is the postmaster: its reaped children are every database's

    def _sample(self, *, initial: bool = False) -> dict[str, set[int]]:
        table = read_processes()
        current = self.groups.classify(table)
        for group, pids in current.items():
            self.members.setdefault(group, set()).update(pids)
            for pid in pids:
                value = self._value(table[pid], group)
                if initial:
                    self.first[pid] = value
                self.last[pid] = value
        return current

    def start(self) -> None:
        self.machine_ticks = machine_busy_ticks()
        self._sample(initial=True)
        self._sampler = threading.Thread(target=self._run, name="bench-cpu-meter", daemon=True)
        self._sampler.start()

    def _run(self) -> None:
        while not self._stopping.wait(SAMPLE_SECONDS):
            self._sample()

    def stop(self) -> dict[str, float]:
        """CPU seconds of each group over the run, and `machine` (busy seconds of the whole machine)."""
        self._stopping.set()
        if self._sampler is not None:
            self._sampler.join()
        at_end = self._sample()
        machine = (machine_busy_ticks() - self.machine_ticks) * TICK_SECONDS
        spent: dict[str, float] = {}
        for group, pids in self.members.items():
            counted = at_end[group] if group in TREE_GROUPS else pids
            ticks = sum(self.last[pid] - self.first.get(pid, 0) for pid in counted)
            spent[group] = ticks * TICK_SECONDS
        spent["machine"] = machine
        return spent
