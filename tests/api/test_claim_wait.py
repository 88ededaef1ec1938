"""`"wait"` on claims/next and reviews/next (SPEC §25), through the test client (no parking worker: the
view waits in its thread), with real commits from other threads waking it through the process's event
watcher and the registry of claim waiters (LISTEN/NOTIFY on PostgreSQL, the short poll on SQLite).

The parked path under the real server is tests/api/test_claim_wait_serve.py; the registry alone is
tests/push/test_claim_waiters.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from core.errors import TaskTaken
from leases.models import IdempotencyRecord
from ledger.actors import SYSTEM
from ledger.models import EventType
from ledger.services import event_append
from push.claim_waiters import claim_waiters
from push.waiting import event_watcher
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    """Its LISTEN connection would keep PostgreSQL from dropping the test database."""
    yield
    event_watcher().stop()


def claim_next(client, project, wait, **body):
    def call():
        try:
            started = time.monotonic()
            response = client.post(
                "/api/v1/claims/next/", {"project": project.slug, "wait": wait, **body}, format="json"
            )
            return response, time.monotonic() - started
        finally:
            connection.close()

    return call


def later(seconds: float, work) -> threading.Thread:
    def run():
        try:
            time.sleep(seconds)
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def parked(count: int, seconds: float = 10.0) -> None:
    """Until `count` waiters are parked in the registry."""
    deadline = time.monotonic() + seconds
    while claim_waiters().waiting() < count:
        assert time.monotonic() < deadline, claim_waiters().waiting()
        time.sleep(0.02)


@pytest.mark.parametrize("wait", [61, -1, "x", 1.5])
def test_wait_is_validated(wait):
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    error = assert_error(
        client.post("/api/v1/claims/next/", {"project": project.slug, "wait": wait}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert "wait" in str(error)
    error = assert_error(
        client.post("/api/v1/reviews/next/", {"project": project.slug, "wait": wait}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert "wait" in str(error)


def test_unknown_fields_are_still_refused_next_to_wait():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    response = client.post("/api/v1/claims/next/", {"project": project.slug, "wait": 5, "wiat": 5}, format="json")
    assert "wiat" in str(assert_error(response, 400, "VALIDATION_ERROR"))


def test_a_claimable_task_is_claimed_at_once_without_waiting():
    project = ProjectFactory()
    task = TaskFactory(project=project)
    response, took = claim_next(client_for(AgentFactory(projects=[project])), project, 30)()
    assert response.status_code == 201
    assert response.json()["task"]["key"] == task.key
    assert took < 2.0


def test_nothing_claimable_answers_204_at_the_deadline():
    project = ProjectFactory()
    response, took = claim_next(client_for(AgentFactory(projects=[project])), project, 1)()
    assert response.status_code == 204
    assert 0.9 < took < 3.0
    assert claim_waiters().waiting() == 0


def test_a_waiter_gets_the_task_another_agent_creates():
    project = ProjectFactory()
    writer = later(0.5, lambda: TaskFactory(project=project, title="made while waiting"))
    response, took = claim_next(client_for(AgentFactory(projects=[project])), project, 10)()
    writer.join()
    assert response.status_code == 201
    assert response.json()["task"]["title"] == "made while waiting"
    assert 0.4 < took < 4.0


def test_a_waiter_with_an_idempotency_key_gets_the_task_and_its_replay_is_the_same_claim():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    writer = later(0.5, lambda: TaskFactory(project=project))
    response = client.post(
        "/api/v1/claims/next/", {"project": project.slug, "wait": 10}, format="json", HTTP_IDEMPOTENCY_KEY="wait-1"
    )
    writer.join()
    assert response.status_code == 201  # the empty tries before it stored nothing under the key
    replay = client.post(
        "/api/v1/claims/next/", {"project": project.slug, "wait": 10}, format="json", HTTP_IDEMPOTENCY_KEY="wait-1"
    )
    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["attempt"]["id"] == response.json()["attempt"]["id"]


def test_the_204_at_the_deadline_stores_nothing_under_the_key_and_the_key_asks_afresh_later():
    """Issue 34: the last try of an idle wait reads, and answers 204 without the claim's write or a stored 204."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    client = client_for(agent)
    body = {"project": project.slug, "wait": 1}
    empty = client.post("/api/v1/claims/next/", body, format="json", HTTP_IDEMPOTENCY_KEY="idle-1")
    assert empty.status_code == 204
    assert not IdempotencyRecord.objects.filter(agent=agent, key="idle-1").exists()
    task = TaskFactory(project=project)
    again = client.post("/api/v1/claims/next/", body, format="json", HTTP_IDEMPOTENCY_KEY="idle-1")
    assert again.status_code == 201  # not a replayed 204: nothing was stored
    assert again.json()["task"]["key"] == task.key
    assert "Idempotent-Replayed" not in again


def test_a_key_answered_meanwhile_is_still_answered_by_the_claims_path_at_the_deadline():
    """A stored answer for the key (here another request's, so IDEMPOTENCY_CONFLICT) is not hidden by the 204."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])

    def wait_under_the_key():
        try:
            return client_for(agent).post(
                "/api/v1/claims/next/", {"project": project.slug, "wait": 2}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
            )
        finally:
            connection.close()

    waiter = ThreadPoolExecutor(1).submit(wait_under_the_key)
    parked(1)
    other = client_for(agent).post(
        "/api/v1/claims/next/", {"project": project.slug}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert other.status_code == 204  # stored: a claim-next without wait keeps its 204
    assert IdempotencyRecord.objects.filter(agent=agent, key="k-1", status_code=204).exists()
    assert_error(waiter.result(timeout=10), 409, "IDEMPOTENCY_CONFLICT")


def test_events_that_cannot_make_work_claimable_do_not_wake_the_waiter():
    project = ProjectFactory()
    claimed = TaskFactory(project=project)
    agent = AgentFactory(projects=[project])
    assert client_for(agent).post("/api/v1/claims/next/", {"project": project.slug}, format="json").status_code == 201
    waiter = ThreadPoolExecutor(1).submit(claim_next(client_for(AgentFactory(projects=[project])), project, 3))
    parked(1)
    time.sleep(0.3)  # a wake owed to commits before the waiter (the claim above; SQLite's first poll) is spent
    parked(1)
    wakes = claim_waiters().wakes
    for _ in range(3):
        event_append(type=EventType.NOTE_ADDED, actor=SYSTEM, at=project.created_at, project=project, task=claimed)
    time.sleep(0.5)  # the watcher has seen them (SQLite polls every 50 ms)
    assert claim_waiters().wakes == wakes
    assert waiter.result(timeout=10)[0].status_code == 204


# How long the twenty waiters below wait, and so how long the test gives them to park. Under load (a shared
# CI machine, nice 19) twenty requests took over 10 s to park; the first one parked leaves at its deadline,
# so a longer limit for parking than the wait could never be met. 15 s: room for a loaded machine, and a
# hang (a waiter that never parks, a wake never delivered) still fails within 15 s, not at the job's timeout.
MANY_WAITERS_WAIT = 15


def test_many_waiters_n_tasks_in_one_commit_n_distinct_claims_and_the_rest_wait_on():
    project = ProjectFactory()
    waiters, tasks = 20, 4
    clients = [client_for(AgentFactory(projects=[project])) for _ in range(waiters)]
    with ThreadPoolExecutor(waiters) as pool:
        futures = [pool.submit(claim_next(client, project, MANY_WAITERS_WAIT)) for client in clients]
        parked(waiters, seconds=MANY_WAITERS_WAIT)
        time.sleep(0.3)  # a wake owed to commits before the waiters (SQLite's first poll) is spent
        parked(waiters, seconds=MANY_WAITERS_WAIT)
        wakes = claim_waiters().wakes
        with transaction.atomic():
            made = [TaskFactory(project=project).key for _ in range(tasks)]
        answers = [future.result(timeout=3 * MANY_WAITERS_WAIT)[0] for future in futures]
    claimed = [answer.json()["task"]["key"] for answer in answers if answer.status_code == 201]
    assert sorted(claimed) == sorted(made)  # every task once, each to its own waiter
    assert sum(answer.status_code == 204 for answer in answers) == waiters - tasks
    # One wake per task: on SQLite one chain (each winner saw more left than anyone else woken could take and
    # passed the wake on), on PostgreSQL one NOTIFY per insert, four chains at once, and each winner sees the
    # others' tasks still claimable (their claims uncommitted) but no more than those others carry. At most
    # one more per task: a winner that settles before a later NOTIFY is heard passes on, and that NOTIFY's
    # waiter may then find its task taken. Not the herd: every waiter per commit would be 20 wakes, or 80.
    assert tasks <= claim_waiters().wakes - wakes <= 2 * tasks
    assert claim_waiters().waiting() == 0


def test_a_woken_waiter_that_cannot_take_the_task_passes_the_wake_on():
    project = ProjectFactory()
    picky = claim_next(client_for(AgentFactory(projects=[project])), project, 3, task_class="gpu")
    plain = claim_next(client_for(AgentFactory(projects=[project])), project, 3)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(picky)
        parked(1)  # the picky one is the oldest: the wake goes to it first
        second = pool.submit(plain)
        parked(2)
        started = time.monotonic()
        task = TaskFactory(project=project)
        got, _took = second.result(timeout=10)
        passed_on = time.monotonic() - started
        assert first.result(timeout=10)[0].status_code == 204
    assert got.status_code == 201
    assert got.json()["task"]["key"] == task.key
    assert passed_on < 2.0  # handed on, not found at the deadline


def test_a_lost_race_while_waiting_waits_on(monkeypatch):
    import leases.apis.claims as claims_api

    project = ProjectFactory()
    real = claims_api.lease_claim_next
    refusals = []

    def racing(**kwargs):
        if not refusals:
            refusals.append(1)
            raise TaskTaken("Every claimable task was taken by another agent meanwhile; ask again.")
        return real(**kwargs)

    monkeypatch.setattr(claims_api, "lease_claim_next", racing)
    writer = later(0.5, lambda: TaskFactory(project=project))
    response, _ = claim_next(client_for(AgentFactory(projects=[project])), project, 10)()
    writer.join()
    assert refusals == [1]
    assert response.status_code == 201


def test_a_review_waiter_wakes_on_a_review_request_not_on_task_work():
    project = ProjectFactory()
    client = client_for(AgentFactory(projects=[project]))
    started = time.monotonic()
    writer = later(0.3, lambda: TaskFactory(project=project))
    response = client.post("/api/v1/reviews/next/", {"project": project.slug, "wait": 1}, format="json")
    writer.join()
    assert response.status_code == 204
    assert time.monotonic() - started > 0.9


def test_two_hundred_parked_waiters_one_event_one_wake():
    """Against the real watcher and registry: 200 in-process waiters, one task created, one woken."""
    project = ProjectFactory()
    registry = claim_waiters()
    woken: list[int] = []
    tickets = []
    for index in range(200):
        ticket = registry.ticket(projects={project.pk}, queue="work")
        registry.park(ticket, lambda index=index: woken.append(index))
        tickets.append(ticket)
    try:
        time.sleep(0.3)  # a wake owed to commits before the waiters (SQLite's first poll) is spent
        before = list(woken)
        for index in before:  # such a waiter would have tried, found nothing, and parked again
            registry.settle(tickets[index], claimable=0)
            registry.park(tickets[index], lambda index=index: woken.append(index))
        TaskFactory(project=project)
        deadline = time.monotonic() + 5
        while len(woken) == len(before) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert len(woken) - len(before) == 1
        event_append(type=EventType.NOTE_ADDED, actor=SYSTEM, at=project.created_at, project=project)
        time.sleep(0.3)
        assert len(woken) - len(before) == 1
    finally:
        for ticket in tickets:
            registry.close(ticket)
