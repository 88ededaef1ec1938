"""How many waiting requests (streams and long-polls) one process holds, per agent and per address (issue 27, H2).

One agent's token, or one address, may not fill a worker's connection slots
with parked requests: each key has a limit, each process admits its share of
it, and a process holds waiters in at most half its connection slots, so the
other half stays for ordinary requests.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping

from core.errors import RateLimited


def waiter_capacity(worker_connections: int) -> int:
    """Waiters one worker admits: half its connection slots, so the other half stays for ordinary requests."""
    return max(1, worker_connections // 2)


class WaiterSlots:
    """Waiters held per key (`agent:<id>`, `address:<ip>`) in this process, each key against its limit.

    Limits are the server's; with `processes` > 1 each process admits its
    share. `capacity` bounds this process's waiters whatever their keys.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._total = 0
        self.processes = 1
        self.capacity: int | None = None

    def configure(self, *, processes: int, capacity: int | None) -> None:
        with self._lock:
            self.processes, self.capacity = max(1, processes), capacity

    def share(self, limit: int) -> int:
        """This process's part of a server-wide limit: ceil(limit / processes), at least one."""
        return max(1, -(-limit // self.processes))

    def admit(self, limits: Mapping[str, int]) -> Callable[[], None]:
        """Take one slot under every key, or raise `RateLimited`; returns the release (safe to call twice)."""
        keys = tuple(limits)
        with self._lock:
            if self.capacity is not None and self._total >= self.capacity:
                raise RateLimited(
                    "The server holds as many waiting requests as it allows; retry later or without waiting.",
                    details={"limit": "waiters_per_process", "retry_after_seconds": 1},
                )
            for key, limit in limits.items():
                if self._held[key] >= self.share(limit):
                    raise RateLimited(
                        "Too many open streams and long-polls; close one or retry without waiting.",
                        details={"limit": f"waiters_per_{key.partition(':')[0]}", "retry_after_seconds": 1},
                    )
            for key in keys:
                self._held[key] += 1
            self._total += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                for key in keys:
                    self._held[key] -= 1
                    if self._held[key] <= 0:
                        del self._held[key]
                self._total -= 1

        return release

    def held(self, key: str | None = None) -> int:
        with self._lock:
            return self._total if key is None else self._held.get(key, 0)


_slots = WaiterSlots()


def waiter_slots() -> WaiterSlots:
    """The process's one `WaiterSlots` (the worker configures it; other servers use it as it is)."""
    return _slots
