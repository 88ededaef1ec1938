"""Waiters' slots (issue 27, H2): counted right across threads, and given back on every way a waiter ends."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from core.errors import RateLimited
from core.waiter_slots import WaiterSlots, waiter_capacity, waiter_slots
from push.waiting import event_watcher
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory


def test_slots_are_counted_exactly_under_threads_and_released_once():
    slots = WaiterSlots()
    barrier = threading.Barrier(16)

    def take() -> object:
        barrier.wait()
        try:
            return slots.admit({"agent:1": 10, "address:a": 100})
        except RateLimited:
            return None

    with ThreadPoolExecutor(16) as pool:
        taken = [r for r in pool.map(lambda _: take(), range(16)) if r is not None]
    assert len(taken) == 10
    assert slots.held("agent:1") == 10
    for release in taken:
        release()
        release()  # twice is harmless
    assert slots.held() == 0
    assert slots.held("address:a") == 0


def test_each_process_takes_its_share_and_half_the_connections_at_most():
    slots = WaiterSlots()
    slots.configure(processes=2, capacity=waiter_capacity(6))
    assert waiter_capacity(1000) == 500
    first = [slots.admit({"agent:1": 3}) for _ in range(2)]  # ceil(3 / 2)
    with pytest.raises(RateLimited) as refused:
        slots.admit({"agent:1": 3})
    assert refused.value.details["limit"] == "waiters_per_agent"
    slots.admit({"agent:2": 3})
    with pytest.raises(RateLimited) as full:
        slots.admit({"agent:3": 3})
    assert full.value.details["limit"] == "waiters_per_process"
    first[0]()
    slots.admit({"agent:3": 3})


def get_in_thread(client, path: str):
    try:
        return client.get(path)
    finally:
        connection.close()  # this thread's own: it would keep the test database from being dropped


@pytest.fixture
def two_waiters(settings):
    settings.LEASEHOLD_WAITERS_PER_AGENT = 2
    yield
    event_watcher().stop()


@pytest.mark.django_db(transaction=True)
def test_long_polls_past_the_bound_are_refused_and_ended_ones_free_their_slot(two_waiters):
    """Through the test client (no parking worker): the waits hold their slots in their threads."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    client = client_for(agent)
    with ThreadPoolExecutor(2) as pool:
        waits = [pool.submit(get_in_thread, client_for(agent), "/api/v1/changes/?tail=true&wait=3") for _ in range(2)]
        deadline = time.monotonic() + 2.5
        while waiter_slots().held(f"agent:{agent.pk}") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert_error(client.get("/api/v1/changes/?tail=true&wait=3"), 429, "RATE_LIMITED")
        assert client.get("/api/v1/changes/?tail=true").status_code == 200  # no wait: no slot
        assert [w.result().status_code for w in waits] == [200, 200]
    assert waiter_slots().held(f"agent:{agent.pk}") == 0


@pytest.mark.django_db(transaction=True)
def test_a_stream_holds_its_slot_until_its_response_is_closed(two_waiters):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    client = client_for(agent)
    streams = [client.get("/api/v1/changes/stream/") for _ in range(2)]
    assert [s.status_code for s in streams] == [200, 200]
    assert_error(client.get("/api/v1/changes/stream/"), 429, "RATE_LIMITED")
    for stream in streams:
        stream.close()  # never iterated
    assert waiter_slots().held(f"agent:{agent.pk}") == 0
    assert client.get("/api/v1/changes/stream/").status_code == 200
