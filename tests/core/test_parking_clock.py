"""The parking worker's clock (core/parking.py): each parked lot is woken at its deadline, the clock sleeping
until the earliest one rather than ticking (issue 34: 1,000 idle runner slots)."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from core.parking import ParkingMixin
from core.parking_lot import Lot
from core.waiter_slots import waiter_slots


class Connection:
    """What the lot keeps of gunicorn's connection: its socket (and, as a dict key, its identity)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock


class CountingLot(dict[Any, Lot]):
    """The worker's lots, counting how often the clock looked through them."""

    looks = 0

    def values(self) -> Any:
        self.looks += 1
        return super().values()


class ClockOnly(ParkingMixin):
    """The mixin with what it takes from gunicorn's gthread worker; woken lots are recorded, not resumed."""

    def __init__(self) -> None:
        self.poller = selectors.DefaultSelector()
        self._lock = threading.RLock()
        self.cfg = SimpleNamespace(threads=4, workers=1, worker_connections=1000)
        self.woken: list[tuple[str, float]] = []
        self.sockets: list[socket.socket] = []
        self.init_parking()
        with self._lock:
            self._lot = CountingLot()

    def _submit_resume(self, lot: Lot) -> None:
        self.woken.append((lot.req, time.monotonic()))

    def park_lot(self, name: str, deadline: float) -> Lot:
        ours, theirs = socket.socketpair()
        self.sockets += [ours, theirs]
        lot = Lot(Connection(ours), name, deadline, lambda wake: lambda: None)
        self._park(lot)
        return lot


@pytest.fixture
def worker() -> Any:
    made = ClockOnly()
    yield made
    for sock in made.sockets:
        sock.close()
    waiter_slots().configure(processes=1, capacity=None)


def test_the_clock_sleeps_until_the_deadline_instead_of_ticking(worker: Any) -> None:
    """A lot a minute away: in a second the clock looks at the lots at most when it parks, not every tick."""
    worker.park_lot("a minute", time.monotonic() + 60)
    time.sleep(1.0)
    assert worker._lot.looks <= 2
    assert worker.woken == []


def _run_loop(worker: ClockOnly, until: float) -> None:
    """The event loop's part until a lot is woken: hand woken lots to the resume (here: record them)."""
    while time.monotonic() < until and not worker.woken:
        for key, _ in worker.poller.select(0.05):
            if key.fileobj == worker._wake_read:
                key.data(key.fileobj)


def test_a_lot_is_woken_at_its_deadline_not_before(worker: Any) -> None:
    deadline = time.monotonic() + 0.3
    worker.park_lot("late", deadline)
    _run_loop(worker, time.monotonic() + 5)
    assert [name for name, _ in worker.woken] == ["late"]
    assert worker.woken[0][1] >= deadline


def test_a_lot_parked_with_an_earlier_deadline_wakes_the_sleeping_clock(worker: Any) -> None:
    """The clock sleeps until the first lot's deadline, a minute away; a second lot due sooner must not
    wait for it (the clock is told of an earlier deadline when that lot parks)."""
    worker.park_lot("a minute", time.monotonic() + 60)
    time.sleep(0.2)  # the clock is asleep until the first lot's deadline
    soon = time.monotonic() + 0.2
    worker.park_lot("soon", soon)
    _run_loop(worker, time.monotonic() + 10)
    assert [name for name, _ in worker.woken] == ["soon"]
    assert worker.woken[0][1] >= soon
