"""`"wait"` on landings/next (SPEC §25): a lander parks until a task is delivered, and one delivery wakes one lander."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from landing.services import LandingSettings, project_set_landing
from ledger.actors import SYSTEM
from push.waiting import event_watcher
from tests.api.conftest import client_for
from tests.api.test_claim_wait import parked
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.landing.helpers import deliver, landing_headers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    yield
    event_watcher().stop()


def _next(client, wait):
    def call():
        try:
            started = time.monotonic()
            response = client.post("/api/v1/landings/next/", {"project": "wait", "wait": wait}, format="json")
            return response, time.monotonic() - started
        finally:
            connection.close()

    return call


def test_waiting_landers_get_one_landing_per_delivery_and_the_rest_answer_204_at_the_deadline():
    project = ProjectFactory(slug="wait", repository="/srv/wait")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    worker = AgentFactory(projects=[project])
    landers = [client_for(AgentFactory(projects=[project])) for _ in range(3)]
    task = TaskFactory(project=project)
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(_next(client, 4)) for client in landers]
        parked(3)
        deliver(worker, task.key)
        results = [future.result(timeout=30) for future in futures]
    connection.close()
    statuses = sorted(response.status_code for response, _ in results)
    assert statuses == [201, 204, 204]
    granted = next(response for response, _ in results if response.status_code == 201)
    assert [item["key"] for item in granted.json()["tasks"]] == [task.key]
    # The winner was woken by the delivery, not by its deadline.
    assert min(elapsed for response, elapsed in results if response.status_code == 201) < 3.5


def test_a_released_landing_wakes_a_parked_lander_at_once():
    project = ProjectFactory(slug="wait", repository="/srv/wait")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    worker = AgentFactory(projects=[project])
    holder, waiter = (client_for(AgentFactory(projects=[project])) for _ in range(2))
    task = TaskFactory(project=project)
    deliver(worker, task.key)
    grant = holder.post("/api/v1/landings/next/", {"project": "wait"}, format="json").json()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(_next(waiter, 8))
        parked(1)  # the target is held: the other lander waits
        released = holder.post(
            f"/api/v1/landings/{grant['landing']['id']}/release/", {}, format="json", **landing_headers(grant)
        )
        response, elapsed = future.result(timeout=30)
    connection.close()
    assert released.status_code == 200
    assert response.status_code == 201
    assert [item["key"] for item in response.json()["tasks"]] == [task.key]
    assert elapsed < 6  # woken by the release, not by its deadline
