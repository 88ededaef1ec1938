"""Changing the projects of an agent: the service, its effect on the API, and the admin page."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client

from core.errors import LeaseNotHeld
from leases.services import agent_set_projects, attempt_finish, lease_claim
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project
from tests.api.conftest import client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def test_setting_projects_appends_one_event_naming_what_changed_and_nothing_when_unchanged():
    web, docs, ops = (ProjectFactory(slug=slug) for slug in ("web", "docs", "ops"))
    agent = AgentFactory(handle="agent-07", projects=[web, docs])
    result = agent_set_projects(agent=agent, projects=[docs, ops], actor=SYSTEM)
    assert (result.added, result.removed) == (["ops"], ["web"])
    assert set(agent.projects.values_list("slug", flat=True)) == {"docs", "ops"}
    changed = Event.objects.filter(type=EventType.AGENT_PROJECTS_CHANGED)
    assert [event.payload for event in changed] == [{"handle": "agent-07", "added": ["ops"], "removed": ["web"]}]
    agent_set_projects(agent=agent, projects=[ops, docs], actor=SYSTEM)
    assert changed.count() == 1


def test_an_agent_claims_in_a_project_it_gains_and_loses_what_it_held_in_one_it_lost():
    web, docs = ProjectFactory(slug="web"), ProjectFactory(slug="docs")
    agent = AgentFactory(projects=[web])
    held = lease_claim(task=TaskFactory(project=web), agent=agent)
    docs_task = TaskFactory(project=docs)
    client = client_for(agent)
    assert client.post(f"/api/v1/tasks/{docs_task.key}/claim/", {}, format="json").status_code == 404

    agent_set_projects(agent=agent, projects=[docs], actor=SYSTEM)
    assert client.post(f"/api/v1/tasks/{docs_task.key}/claim/", {}, format="json").status_code == 201
    assert [row["key"] for row in client.get("/api/v1/tasks/").json()["results"]] == [docs_task.key]
    # The lease it held in `web` was revoked with the project (issue 14, finding 9).
    with pytest.raises(LeaseNotHeld):
        attempt_finish(proof=proof_of(held), outcome="done")


def test_the_admin_page_sets_projects_logs_the_change_and_is_for_ledger_admins_only(ops_client, manager):
    web, docs = ProjectFactory(slug="web"), ProjectFactory(slug="docs")
    Project.objects.filter(pk=ProjectFactory(slug="old").pk).update(archived_at=clock.now())
    agent = AgentFactory(handle="agent-07", projects=[web])
    url = f"/admin/ledger/agent/{agent.pk}/projects/"

    page = ops_client.get(url)
    assert page.status_code == 200
    form = page.context["form"]
    offered = [project.slug for project in form.fields["projects"].queryset]
    assert offered == ["docs", "web"]  # "old" is archived and not the agent's: not offered
    assert [project.slug for project in form.initial["projects"]] == ["web"]
    change_page = ops_client.get(f"/admin/ledger/agent/{agent.pk}/change/")
    assert url.encode() in change_page.content

    response = ops_client.post(url, {"projects": [docs.pk]})
    assert response.status_code == 302
    assert set(agent.projects.values_list("slug", flat=True)) == {"docs"}
    entry = LogEntry.objects.get(object_id=str(agent.pk))
    assert entry.get_change_message() == "Projects: added docs; removed web."
    assert Event.objects.get(type=EventType.AGENT_PROJECTS_CHANGED).actor_user_id == entry.user_id

    manager_client = Client()
    manager_client.force_login(manager)
    assert manager_client.get(url).status_code == 403
    assert manager_client.post(url, {"projects": [web.pk]}).status_code == 403
    assert url.encode() not in manager_client.get(f"/admin/ledger/agent/{agent.pk}/change/").content
    assert set(agent.projects.values_list("slug", flat=True)) == {"docs"}
