"""The registry of claim waiters (SPEC §25): one waking commit wakes one waiter of its project and queue.

In-process, with a stand-in for the event watcher (the registry's `listen`), so each test controls
exactly what "commits". The real watcher and real claims are in tests/api/test_claim_wait.py.
"""

from __future__ import annotations

import threading
from functools import partial

import pytest

from ledger.models import EventType
from push.claim_waiters import ClaimWaiters, Ticket
from push.waiting import Committed

PROJECT, OTHER = 1, 2


class Listening:
    def __init__(self) -> None:
        self.listeners: list = []

    def __call__(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def commit(self, heard: Committed) -> None:
        for listener in list(self.listeners):
            listener(heard)


@pytest.fixture
def watcher() -> Listening:
    return Listening()


@pytest.fixture
def registry(watcher) -> ClaimWaiters:
    return ClaimWaiters(listen=watcher)


def park_many(registry: ClaimWaiters, count: int, *, queue: str = "work", project: int = PROJECT):
    woken: list[int] = []
    tickets: list[Ticket] = []
    for index in range(count):
        ticket = registry.ticket(projects={project}, queue=queue)
        registry.park(ticket, partial(woken.append, index))
        tickets.append(ticket)
    return tickets, woken


def test_one_waking_commit_wakes_exactly_one_of_two_hundred_waiters_the_oldest(registry, watcher):
    tickets, woken = park_many(registry, 200)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert woken == [0]
    assert registry.waiting(PROJECT, "work") == 199
    assert tickets[0].chain is not None


def test_each_waking_commit_wakes_the_next_waiter_and_no_one_twice(registry, watcher):
    _, woken = park_many(registry, 200)
    for _ in range(5):
        watcher.commit({PROJECT: frozenset({EventType.TASK_STATUS_CHANGED})})
    assert woken == [0, 1, 2, 3, 4]


def test_commits_that_cannot_make_work_claimable_wake_no_one(registry, watcher):
    _, woken = park_many(registry, 50)
    watcher.commit({PROJECT: frozenset({EventType.NOTE_ADDED, EventType.ATTEMPT_CLAIMED, EventType.ATTEMPT_UPDATED})})
    assert woken == []
    assert registry.waiting() == 50


def test_a_commit_wakes_only_its_own_project_and_queue(registry, watcher):
    _, work_woken = park_many(registry, 3, queue="work", project=OTHER)
    _, review_woken = park_many(registry, 3, queue="review")
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert work_woken == []
    assert review_woken == []
    watcher.commit({PROJECT: frozenset({EventType.REVIEW_REQUESTED})})
    assert work_woken == []
    assert review_woken == [0]


def test_unknown_types_wake_one_waiter_per_queue(registry, watcher):
    _, work_woken = park_many(registry, 3, queue="work")
    _, review_woken = park_many(registry, 3, queue="review")
    watcher.commit({PROJECT: None})
    assert work_woken == [0]
    assert review_woken == [0]


def test_a_woken_waiter_that_cannot_claim_passes_the_wake_to_the_next_one(registry, watcher):
    tickets, woken = park_many(registry, 3)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.settle(tickets[0], pass_on=True)  # the task is there, but not for this waiter
    assert woken == [0, 1]
    registry.park(tickets[0], lambda: woken.append(0))  # it waits on, behind the others
    registry.settle(tickets[1], pass_on=True)
    assert woken == [0, 1, 2]
    registry.park(tickets[1], lambda: woken.append(1))
    registry.settle(tickets[2], pass_on=True)
    assert woken == [0, 1, 2]  # every waiter tried this wake: it ends, it does not go round again
    assert registry.waiting() == 2


def test_a_woken_waiter_that_claims_passes_on_only_when_more_is_claimable(registry, watcher):
    tickets, woken = park_many(registry, 3)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.settle(tickets[0], pass_on=True)  # claimed one; another task is still there
    registry.close(tickets[0])
    assert woken == [0, 1]
    registry.settle(tickets[1], pass_on=False)  # claimed the last one
    registry.close(tickets[1])
    assert woken == [0, 1]
    assert registry.waiting() == 1


def test_a_finished_projects_wake_goes_only_to_the_waiters_that_wait_until_it_is_empty(registry, watcher):
    """The last task done: the woken waiter finds nothing claimable and the project finished. An idle fleet's
    other parked runners could do nothing with that wake; a waiter with `until_empty` answers it."""
    woken: list[str] = []
    tickets = {}
    for name, until_empty in (("a", False), ("b", False), ("c", True), ("d", False), ("e", True)):
        tickets[name] = registry.ticket(projects={PROJECT}, queue="work", until_empty=until_empty)
        registry.park(tickets[name], partial(woken.append, name))
    watcher.commit({PROJECT: frozenset({EventType.ATTEMPT_FINISHED})})
    assert woken == ["a"]
    registry.settle(tickets["a"], pass_on=True, until_empty_only=True)
    assert woken == ["a", "c"]  # b and d skipped
    registry.close(tickets["c"])  # it answered 204: the project is finished
    assert woken == ["a", "c", "e"]
    registry.settle(tickets["e"], pass_on=True, until_empty_only=True)
    assert woken == ["a", "c", "e"]
    assert registry.waiting() == 2  # b and d wait on, never woken


def test_a_woken_waiter_that_goes_away_passes_the_wake_on(registry, watcher):
    tickets, woken = park_many(registry, 2)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.close(tickets[0])  # client gone before it answered
    assert woken == [0, 1]


def test_a_commit_while_the_waiter_was_trying_wakes_it_as_it_parks(registry, watcher):
    ticket = registry.ticket(projects={PROJECT}, queue="work")
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})  # nobody parked: nobody woken
    woken = threading.Event()
    registry.park(ticket, woken.set)
    assert woken.is_set()
    assert registry.waiting() == 0


def test_a_cancelled_waiter_is_not_woken_and_the_registry_stops_listening_when_empty(registry, watcher):
    tickets, woken = park_many(registry, 2)
    assert len(watcher.listeners) == 1
    cancel = registry.park(tickets[0], lambda: woken.append(-1))
    cancel()
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert woken == [1]
    for ticket in tickets:
        registry.close(ticket)
    assert watcher.listeners == []


def test_a_lost_listener_wakes_one_waiter_per_project_and_queue(registry, watcher):
    _, work_woken = park_many(registry, 3)
    _, other_woken = park_many(registry, 3, project=OTHER)
    watcher.commit(None)
    assert work_woken == [0]
    assert other_woken == [0]
