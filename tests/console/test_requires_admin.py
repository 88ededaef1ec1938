"""SPEC §23.1 in the admin and the management commands: a task's `requires`, an agent's `labels`."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import Agent, Event, EventType, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"


def test_the_edit_page_sets_requires_and_refuses_a_bad_label(ops_client):
    task = TaskFactory(project=ProjectFactory(slug="web"), title="Train")
    data = {
        "edited_version": task.version,
        "title": task.title,
        "description": "",
        "acceptance_criteria": "",
        "priority": 0,
        "task_class": "",
        "labels": "",
    }
    refused = ops_client.post(f"{TASKS}{task.pk}/edit/", {**data, "requires": "gpu, GPU!"})
    assert refused.status_code == 200
    assert "requires" in refused.context["form"].errors
    assert Task.objects.get(pk=task.pk).requires == []

    saved = ops_client.post(f"{TASKS}{task.pk}/edit/", {**data, "requires": "gpu, cuda"})
    assert saved.status_code == 302
    assert Task.objects.get(pk=task.pk).requires == ["gpu", "cuda"]
    shown = ops_client.get(f"{TASKS}{task.pk}/change/").content.decode()
    assert "field-requires" in shown
    assert "&quot;gpu&quot;, &quot;cuda&quot;" in shown
    assert ops_client.get(f"{TASKS}{task.pk}/edit/").context["form"].initial["requires"] == "gpu, cuda"


def test_the_agent_page_sets_labels_with_one_event_and_the_add_form_takes_them(ops_client):
    web = ProjectFactory(slug="web")
    agent = AgentFactory(handle="slot-1", projects=[web])
    url = f"/admin/ledger/agent/{agent.pk}/projects/"
    assert ops_client.post(url, {"projects": [web.pk], "labels": "gpu, Bad Label"}).status_code == 200
    assert Agent.objects.get(pk=agent.pk).labels == []
    response = ops_client.post(url, {"projects": [web.pk], "labels": "gpu, cuda"})
    assert response.status_code == 302
    assert Agent.objects.get(pk=agent.pk).labels == ["gpu", "cuda"]
    assert Event.objects.filter(type=EventType.AGENT_LABELS_CHANGED).count() == 1
    assert "gpu, cuda" in ops_client.get(f"/admin/ledger/agent/{agent.pk}/change/").content.decode()

    created = ops_client.post(
        "/admin/ledger/agent/add/", {"handle": "gpu-box", "kind": "script", "projects": [web.pk], "labels": "gpu"}
    )
    assert created.status_code == 200
    assert Agent.objects.get(handle="gpu-box").labels == ["gpu"]


def test_create_agent_takes_labels_and_refuses_bad_ones(capsys):
    ProjectFactory(slug="web")
    call_command("create_agent", "gpu-1", "--kind", "script", "--project", "web", "--labels", "gpu, cuda")
    assert Agent.objects.get(handle="gpu-1").labels == ["gpu", "cuda"]
    assert "Its labels: gpu, cuda." in capsys.readouterr().out
    with pytest.raises(CommandError, match="VALIDATION_ERROR"):
        call_command("create_agent", "gpu-2", "--kind", "script", "--labels", "GPU")
    assert not Agent.objects.filter(handle="gpu-2").exists()
