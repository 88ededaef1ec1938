"""Issue 32's first failure, in Chromium: an admin changes only the priority of a task an agent holds
(the browser sends the textareas with CRLF line endings), and the holder, renewing all along, finishes
`done` with no acknowledgement asked. The holder is driven through the services (as `leasehold run`'s
calls reach them), between the browser's steps."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from core.errors import LedgerError
from leases.models import Attempt, AttemptStatus
from leases.services import attempt_finish, attempt_renew, lease_claim
from ledger.models import Event, EventType, Task
from tests.console.browser.conftest import login
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db(transaction=True)

DESCRIPTION = "Fix the search copy.\nKeep the tone.\n\nThen ship it."
CRITERIA = "- the copy reads well\n- nothing else moves"


def test_an_admin_edit_of_the_priority_never_stops_the_holder_from_finishing(page, ledger_admin):
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    task = TaskFactory(
        project=project, title="Fix the search copy", description=DESCRIPTION, acceptance_criteria=CRITERIA, priority=1
    )
    grant = lease_claim(task=task, agent=holder, lease_seconds=600)
    proof = proof_of(grant)
    version = Task.objects.get(pk=task.pk).version

    login(page, "ops")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.click("text=Edit…")
    expect(page.locator("#id_description")).to_have_value(DESCRIPTION)
    page.fill("#id_priority", "8")
    page.click("#lh-edit-save")
    expect(page.locator(".messagelist")).to_contain_text(f"Saved {task.key}: priority (now version {version + 1})")

    edited = Task.objects.get(pk=task.pk)
    assert (edited.priority, edited.description, edited.acceptance_criteria) == (8, DESCRIPTION, CRITERIA)
    updated = Event.objects.filter(task=task, type=EventType.TASK_UPDATED).latest("id")
    assert updated.payload["fields"] == ["priority"]

    renewed = attempt_renew(proof=proof)
    assert isinstance(renewed, Attempt), renewed
    finished = attempt_finish(proof=proof, outcome="done", result_summary="Fixed the copy.")
    assert not isinstance(finished, LedgerError), finished  # never ACKNOWLEDGEMENT_REQUIRED
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.COMPLETED
    assert Task.objects.get(pk=task.pk).status == "done"
    assert not Event.objects.filter(task=task, type=EventType.TASK_CONTESTED).exists()

    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    expect(page.locator(".lh-summary")).to_contain_text("Done")
