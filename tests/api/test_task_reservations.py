"""`POST /tasks/{key}/reservation/clear/` (issue 15, bug 1), and what a holder of a cancelled task is told (bug 6)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from leases.services import task_cancel, task_reassign
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task
from ledger.permissions import LEDGER_ADMINS, MANAGERS
from tests.api.conftest import assert_error, attempt_url, client_for, holder
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def clear(client, task, **body):
    return client.post(f"/api/v1/tasks/{task.key}/reservation/clear/", body, format="json")


def staff_client(django_user_model, group: str) -> APIClient:
    user = django_user_model.objects.create_user(username=f"u-{group}", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = APIClient()
    client.force_login(user)
    return client


def test_a_ledger_admin_clears_a_reservation_and_anyone_may_claim_again(django_user_model, task, project, client):
    reserved = AgentFactory(projects=[project])
    task_reassign(task=task, agent=reserved, actor=SYSTEM, reason="hand it over")
    refused = assert_error(
        client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json"), 409, "TASK_NOT_CLAIMABLE"
    )
    assert refused["details"]["reason"] == "reserved_for_another_agent"

    response = clear(staff_client(django_user_model, LEDGER_ADMINS), task, reason="planning changed")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["reserved_for"] is None
    assert body["version"] == Task.objects.get(pk=task.pk).version
    event = Event.objects.get(type=EventType.TASK_RESERVATION_CLEARED)
    assert event.payload == {"agent": reserved.handle, "reason": "planning changed", "version": body["version"]}
    assert client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").status_code == 201


def test_an_agent_may_give_up_its_own_reservation_but_not_another_agents(task, project, agent, other_client):
    task_reassign(task=task, agent=agent, actor=SYSTEM, reason="for you")
    assert_error(clear(other_client, task), 403, "PERMISSION_DENIED")
    assert Task.objects.get(pk=task.pk).reserved_for_id == agent.pk
    response = clear(client_for(agent), task)
    assert response.status_code == 200
    assert Event.objects.get(type=EventType.TASK_RESERVATION_CLEARED).payload["reason"] == "cleared by hand"


def test_managers_cannot_clear_and_unknown_fields_are_refused(django_user_model, task, project, client):
    task_reassign(task=task, agent=AgentFactory(projects=[project]), actor=SYSTEM, reason="x")
    assert_error(clear(staff_client(django_user_model, MANAGERS), task), 403, "PERMISSION_DENIED")
    error = assert_error(clear(client, task, agent="someone"), 400, "VALIDATION_ERROR")
    assert "agent" in str(error)
    assert Task.objects.get(pk=task.pk).reserved_for_id is not None


def test_clearing_a_task_without_a_reservation_answers_it_unchanged(client, task):
    version = Task.objects.get(pk=task.pk).version
    response = clear(client, task)
    assert response.status_code == 200
    assert response.json()["version"] == version
    assert not Event.objects.filter(type=EventType.TASK_RESERVATION_CLEARED).exists()


def test_the_holder_learns_at_renewal_that_its_task_was_cancelled_and_releases(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    assert client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)).json()["task_status"] == "ready"

    task_cancel(task=task, actor=SYSTEM, release=False)

    renewed = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim))
    assert renewed.status_code == 200
    assert renewed.json()["task_status"] == "cancelled"
    done = client.post(
        attempt_url(claim, "finish"),
        {"outcome": "done", "acknowledged_version": Task.objects.get(pk=task.pk).version},
        format="json",
        **holder(claim),
    )
    error = assert_error(done, 400, "INVALID_STATUS_TRANSITION")
    assert "release the attempt" in error["message"]
    released = client.post(attempt_url(claim, "release"), {"reason": "cancelled"}, format="json", **holder(claim))
    assert released.status_code == 200
    assert released.json()["attempt"]["status"] == "released"
