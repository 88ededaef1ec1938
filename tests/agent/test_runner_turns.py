"""One parked claim wait per project per runner (SPEC §24): `agent.runner.turns.ParkingTurns`, with real threads."""

from __future__ import annotations

import threading
import time

from agent.runner.turns import ParkingTurns


def _taker(turns: ParkingTurns, preference: list[str], slot: int, got: dict[int, str | None], stop: threading.Event):
    def take() -> None:
        got[slot] = turns.take(preference, slot, give_up=stop.is_set)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread


def test_one_slot_holds_a_projects_turn_and_the_next_takes_it_only_when_given_back():
    turns, stop, got = ParkingTurns(), threading.Event(), {}
    assert turns.take(["web"], 1, give_up=stop.is_set) == "web"
    waiting = [_taker(turns, ["web"], slot, got, stop) for slot in (2, 3)]
    time.sleep(0.3)
    assert got == {}
    assert turns.parked() == {"web": 1}
    turns.give_back("web", 1)
    deadline = time.monotonic() + 5
    while len(got) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(got) == 1  # exactly one waiting slot took the turn; the other still waits
    (holder,) = got
    assert got[holder] == "web"
    assert turns.parked() == {"web": holder}
    stop.set()
    turns.wake_all()
    for thread in waiting:
        thread.join(timeout=5)
    assert sorted(got.values(), key=str) == [None, "web"]  # the last one gave up: it holds nothing


def test_a_slot_takes_the_first_free_project_of_its_preference():
    turns, stop = ParkingTurns(), threading.Event()
    assert turns.take(["api", "web"], 1, give_up=stop.is_set) == "api"
    assert turns.take(["api", "web"], 2, give_up=stop.is_set) == "web"
    assert turns.parked() == {"api": 1, "web": 2}


def test_giving_back_a_turn_someone_else_holds_changes_nothing():
    turns, stop = ParkingTurns(), threading.Event()
    turns.take(["web"], 1, give_up=stop.is_set)
    turns.give_back("web", 2)
    assert turns.parked() == {"web": 1}


def test_a_paused_or_draining_runner_gives_no_turn():
    turns = ParkingTurns()
    assert turns.take(["web"], 1, give_up=lambda: True) is None
    assert turns.parked() == {}
