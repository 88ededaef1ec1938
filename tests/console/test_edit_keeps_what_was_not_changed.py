"""Issue 32: an edit never changes what the user did not change.

Browsers send textareas with CRLF line endings; the text is normalised to `\\n`
on input (the console form, the API and every service), and a field equal
after normalisation is no change: no version bump, no event, no
acknowledgement asked of the holder.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from leases.services import attempt_finish, lease_claim, task_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task
from ledger.services import task_create
from tests.factories import TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"
DESCRIPTION = "Fix the search copy.\nKeep the tone.\n\nThen ship it."
CRITERIA = "- the copy reads well\n- nothing else moves"


def as_browser_sends(text: str) -> str:
    return text.replace("\n", "\r\n")


def test_editing_only_the_priority_of_a_held_task_leaves_its_text_and_its_holder_alone(ops_client, fleet):
    task = TaskFactory(project=fleet.project, description=DESCRIPTION, acceptance_criteria=CRITERIA)
    grant = lease_claim(task=task, agent=fleet.other)
    task.refresh_from_db()
    version = task.version
    response = ops_client.post(
        f"{TASKS}{task.pk}/edit/",
        {
            "edited_version": version,
            "title": task.title,
            "description": as_browser_sends(DESCRIPTION),
            "acceptance_criteria": as_browser_sends(CRITERIA),
            "priority": 5,
            "task_class": task.task_class,
            "labels": "",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert f"Saved {task.key}: priority (now version" in response.content.decode()
    task.refresh_from_db()
    assert (task.priority, task.description, task.acceptance_criteria) == (5, DESCRIPTION, CRITERIA)
    assert task.version == version + 1
    updated = Event.objects.filter(task=task, type=EventType.TASK_UPDATED).latest("id")
    assert updated.payload["fields"] == ["priority"]

    finished = attempt_finish(proof=proof_of(grant), outcome="done", result_summary="done")
    assert not isinstance(finished, Exception), finished
    task.refresh_from_db()
    assert task.status == "done"


def test_text_equal_after_normalisation_is_no_change(fleet):
    task = fleet.idle
    task_update(task=task, actor=SYSTEM, changes={"description": DESCRIPTION})
    task.refresh_from_db()
    version, events = task.version, Event.objects.count()
    result = task_update(
        task=task, actor=SYSTEM, changes={"description": as_browser_sends(DESCRIPTION), "title": task.title}
    )
    assert result.changed == frozenset()
    task.refresh_from_db()
    assert (task.version, task.description) == (version, DESCRIPTION)
    assert Event.objects.count() == events


def test_text_is_stored_with_newlines_only(fleet):
    created = task_create(
        project=fleet.project,
        title="Copy",
        actor=SYSTEM,
        description="one\r\ntwo\rthree",
        acceptance_criteria="a\r\nb",
    )
    assert (created.description, created.acceptance_criteria) == ("one\ntwo\nthree", "a\nb")
    task = TaskFactory(project=fleet.project)
    task_update(task=task, actor=SYSTEM, changes={"acceptance_criteria": "x\r\ny", "blocked_reason": ""})
    assert Task.objects.get(pk=task.pk).acceptance_criteria == "x\ny"


def test_a_crlf_text_patched_through_the_api_is_stored_with_newlines_and_equal_text_is_no_change(fleet):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {fleet.other.api_token}")
    task = fleet.idle
    url = f"/api/v1/tasks/{task.key}/"
    first = client.patch(url, {"description": as_browser_sends(DESCRIPTION)}, format="json", HTTP_IF_MATCH="1")
    assert first.status_code == 200, first.content
    task.refresh_from_db()
    assert task.description == DESCRIPTION
    version, events = task.version, Event.objects.count()
    again = client.patch(url, {"description": as_browser_sends(DESCRIPTION)}, format="json", HTTP_IF_MATCH=str(version))
    assert again.status_code == 200, again.content
    task.refresh_from_db()
    assert task.version == version
    assert Event.objects.count() == events
