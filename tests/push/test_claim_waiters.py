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
    registry.settle(tickets[0], claimable=1)  # the task is there, but not for this waiter
    assert woken == [0, 1]
    registry.park(tickets[0], lambda: woken.append(0))  # it waits on, behind the others
    registry.settle(tickets[1], claimable=1)
    assert woken == [0, 1, 2]
    registry.park(tickets[1], lambda: woken.append(1))
    registry.settle(tickets[2], claimable=1)
    assert woken == [0, 1, 2]  # every waiter tried this wake: it ends, it does not go round again
    assert registry.waiting() == 2


def test_a_woken_waiter_that_claims_passes_on_only_when_more_is_claimable(registry, watcher):
    tickets, woken = park_many(registry, 3)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.settle(tickets[0], claimable=1)  # claimed one; another task is still there
    registry.close(tickets[0])
    assert woken == [0, 1]
    registry.settle(tickets[1], claimable=0)  # claimed the last one
    registry.close(tickets[1])
    assert woken == [0, 1]
    assert registry.waiting() == 1


def test_winners_pass_on_only_what_the_other_woken_waiters_cannot_take(registry, watcher):
    """Four tasks in four commits: four chains, four waiters woken at once. Each winner still sees the others'
    tasks claimable (their claims not committed yet) but not more than those others can take: four wakes,
    not one more per uncommitted claim (under load that was 15 for 4)."""
    tickets, woken = park_many(registry, 20)
    for _ in range(4):
        watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert woken == [0, 1, 2, 3]
    for index, still_there in ((2, 3), (0, 2), (3, 1), (1, 0)):  # the committed view as each settles
        registry.settle(tickets[index], claimable=still_there, counted=8)
        registry.close(tickets[index])
    assert woken == [0, 1, 2, 3]
    assert registry.waiting() == 16


def test_the_last_woken_waiter_to_settle_passes_on_what_is_left(registry, watcher):
    """Two woken at once, each sees one task left: the first defers to the other, which took nothing (the
    task is not for it) and sees nobody beside it: the wake goes on."""
    tickets, woken = park_many(registry, 3)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.settle(tickets[0], claimable=1, counted=8)  # took one; one left, and tickets[1] is on it
    assert woken == [0, 1]
    registry.settle(tickets[1], claimable=1, counted=8)  # labels: not for it
    assert woken == [0, 1, 2]


def test_a_count_cut_at_its_bound_always_passes_on(registry, watcher):
    tickets, woken = park_many(registry, 12)
    for _ in range(9):
        watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    registry.settle(tickets[0], claimable=8, counted=8)  # eight others carry a wake: but eight is "at least"
    assert woken == [*range(9), 9]


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
    registry.settle(tickets["a"], claimable=0, finished=True)
    assert woken == ["a", "c"]  # b and d skipped
    registry.close(tickets["c"])  # it answered 204: the project is finished
    assert woken == ["a", "c", "e"]
    registry.settle(tickets["e"], claimable=0, finished=True)
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


def test_commits_carried_by_parked_waiters_do_not_wake_a_trying_waiter_again_as_it_parks(registry, watcher):
    """Four commits while one waiter tries: each starts a chain at a parked waiter. The trying one is not
    woken again for them as it parks (that started a fifth chain, and under load more: the herd back)."""
    trying = registry.ticket(projects={PROJECT}, queue="work")
    tickets, woken = park_many(registry, 4)
    for _ in range(4):
        watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert woken == [0, 1, 2, 3]
    late = threading.Event()
    registry.park(trying, late.set)
    assert not late.is_set()
    registry.settle(tickets[0], claimable=1)  # a task left: the chain reaches the waiter that parked since
    assert late.is_set()


def test_a_wake_passed_on_with_nobody_parked_wakes_the_trying_waiter_as_it_parks(registry, watcher):
    """The one parked waiter carries the commit, cannot take the task (labels) and passes on while the only
    other waiter is still trying: nobody is parked to carry it, so that waiter looks again as it parks."""
    trying = registry.ticket(projects={PROJECT}, queue="work")
    (carrier,), woken = park_many(registry, 1)
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    assert woken == [0]
    registry.settle(carrier, claimable=1)
    late = threading.Event()
    registry.park(trying, late.set)
    assert late.is_set()
    assert trying.chain is not None  # it owes an answer for that wake: it passes on in turn


def test_a_dropped_wake_goes_once_to_each_waiter_trying_since_before_it_and_to_no_later_one(registry, watcher):
    """Two waiters trying when the commit comes, nobody parked: each looks again as it parks, once. A waiter
    whose first look came after the commit, and one that already tried the wake, are not woken for it."""
    first = registry.ticket(projects={PROJECT}, queue="work")
    second = registry.ticket(projects={PROJECT}, queue="work")
    watcher.commit({PROJECT: frozenset({EventType.TASK_CREATED})})
    newer = registry.ticket(projects={PROJECT}, queue="work")
    woken: list[str] = []
    registry.park(first, partial(woken.append, "first"))
    assert woken == ["first"]
    registry.settle(first, claimable=1)  # not for it; nobody parked to carry it on
    registry.park(first, partial(woken.append, "first again"))
    registry.park(newer, partial(woken.append, "newer"))
    assert woken == ["first"]
    registry.park(second, partial(woken.append, "second"))
    assert woken == ["first", "second"]
    registry.settle(second, claimable=0)  # it took the task
    assert woken == ["first", "second"]
    assert registry.waiting() == 2


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
