"""A quarantined task is visible as such (issue 32): a badge, a list filter, a dashboard tile, a task-page action."""

from __future__ import annotations

import pytest

from leases.services import lease_claim
from leases.services.quarantine import quarantine_reason
from ledger.models import Event, EventType, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"


@pytest.fixture
def quarantined():
    project = ProjectFactory(slug="q", max_consecutive_failures=1)
    task = TaskFactory(project=project, title="Keeps failing")
    reason = quarantine_reason(attempts=1, last_id=1, last_status="failed", failure_reason_code="other")
    Task.objects.filter(pk=task.pk).update(status="blocked", blocked_reason=reason)
    plain = TaskFactory(project=project, title="Waits for a person")
    Task.objects.filter(pk=plain.pk).update(status="blocked", blocked_reason="waits for the design review")
    ready = TaskFactory(project=project, title="Ready work")
    lease_claim(task=ready, agent=AgentFactory(projects=[project]))
    return task, plain


def test_the_list_and_the_task_page_say_quarantined_not_blocked(ops_client, quarantined):
    task, plain = quarantined
    body = ops_client.get(TASKS).content.decode()
    assert body.count('<span class="lh-badge lh-quarantined">Quarantined</span>') == 1
    page = ops_client.get(f"{TASKS}{task.pk}/change/").content.decode()
    assert '<span class="lh-badge lh-quarantined">Quarantined</span>' in page
    plain_page = ops_client.get(f"{TASKS}{plain.pk}/change/").content.decode()
    assert '<span class="lh-badge lh-quarantined">' not in plain_page


def test_the_list_filters_quarantined_tasks(ops_client, quarantined):
    _ = quarantined
    body = ops_client.get(TASKS).content.decode()
    assert "?effective_status=quarantined" in body
    filtered = ops_client.get(f"{TASKS}?effective_status=quarantined").content.decode()
    assert "Keeps failing" in filtered
    assert "Waits for a person" not in filtered
    assert "Ready work" not in filtered


def test_the_dashboard_counts_quarantined_tasks(ops_client, quarantined):
    body = ops_client.get("/admin/").content.decode()
    assert 'id="lh-tile-quarantined"' in body
    tile = body[body.index('id="lh-tile-quarantined"') :][:400]
    assert '<div class="lh-stat-value">1</div>' in tile
    assert "effective_status=quarantined" in body[body.rindex("<a", 0, body.index('id="lh-tile-quarantined"')) :][:300]


def test_the_task_page_releases_a_quarantined_task(ops_client, quarantined):
    task, plain = quarantined
    url = f"{TASKS}{task.pk}/release-quarantine/"
    assert url in ops_client.get(f"{TASKS}{task.pk}/change/").content.decode()
    assert url.replace(str(task.pk), str(plain.pk)) not in ops_client.get(f"{TASKS}{plain.pk}/change/").content.decode()
    assert ops_client.get(url).status_code == 405
    response = ops_client.post(url)
    assert response.status_code == 302
    assert response["Location"].endswith(f"{TASKS}{task.pk}/change/")
    assert Task.objects.get(pk=task.pk).status == "ready"
    assert Event.objects.filter(type=EventType.TASK_QUARANTINE_RELEASED, task=task).count() == 1
    # A task that is not quarantined is refused with a message, never a 500.
    refused = ops_client.post(url.replace(str(task.pk), str(plain.pk)), follow=True)
    assert refused.status_code == 200
    assert "is not quarantined" in refused.content.decode()
    assert Task.objects.get(pk=plain.pk).status == "blocked"


def test_a_manager_is_offered_no_release(manager_client, quarantined):
    task, _ = quarantined
    page = manager_client.get(f"{TASKS}{task.pk}/change/").content.decode()
    assert "release-quarantine" not in page
    assert manager_client.post(f"{TASKS}{task.pk}/release-quarantine/").status_code == 403
    assert Task.objects.get(pk=task.pk).status == "blocked"
