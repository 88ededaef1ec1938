"""SPEC §23.1 with §25's claim wait: a waiter without a task's labels is never handed it; one with them is."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from push.claim_waiters import claim_waiters
from push.waiting import event_watcher
from tests.api.conftest import client_for
from tests.api.test_claim_wait import claim_next, parked
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    """Its LISTEN connection would keep PostgreSQL from dropping the test database."""
    yield
    event_watcher().stop()


def test_a_gpu_task_is_passed_over_the_plain_waiter_to_the_gpu_waiter():
    project = ProjectFactory()
    plain = claim_next(client_for(AgentFactory(projects=[project])), project, 3)
    gpu = claim_next(client_for(AgentFactory(projects=[project], labels=["gpu"])), project, 10)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(plain)
        parked(1)  # the plain waiter is the oldest: the wake goes to it first
        second = pool.submit(gpu)
        parked(2)
        started = time.monotonic()
        task = TaskFactory(project=project, requires=["gpu"])
        got, _took = second.result(timeout=10)
        passed_on = time.monotonic() - started
        assert first.result(timeout=10)[0].status_code == 204  # never handed the gpu task
    assert got.status_code == 201
    assert got.json()["task"]["key"] == task.key
    assert got.json()["task"]["requires"] == ["gpu"]
    assert passed_on < 2.0  # handed on at once, not found at the deadline


def test_a_plain_waiter_alone_waits_on_past_a_gpu_task_and_takes_the_next_plain_one():
    project = ProjectFactory()
    plain = claim_next(client_for(AgentFactory(projects=[project])), project, 4)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(plain)
        parked(1)
        gpu_task = TaskFactory(project=project, requires=["gpu"], priority=5)
        time.sleep(0.5)  # woken, tried, found nothing it may claim, parked again
        parked(1)
        plain_task = TaskFactory(project=project)
        got, _took = waiting.result(timeout=10)
    assert got.status_code == 201
    assert got.json()["task"]["key"] == plain_task.key
    assert claim_waiters().waiting() == 0
    assert gpu_task.key != plain_task.key
