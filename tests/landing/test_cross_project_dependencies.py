"""Dependencies across projects (SPEC §22): a task may wait for a task of another project on the same
server; only `done` (landed) resolves it; cycles across projects are refused with their path; an agent
of one project sees the other project's task as a stub (key and status, no title or text)."""

from __future__ import annotations

import json

import pytest

from core.errors import DependencyCycle
from ledger.actors import SYSTEM
from ledger.models import Task, TaskStatus
from ledger.services import dependency_add, task_create
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db

SECRET_TITLE = "Secret API migration"
SECRET_TEXT = "rotate the vault key"


@pytest.fixture
def chain(db, clock):
    """A(web) → B(api) → C(web): C waits for B, B waits for A."""
    web, api = ProjectFactory(slug="web2", key_prefix="WEB"), ProjectFactory(slug="api2", key_prefix="API")
    a = task_create(project=web, title="Web A", actor=SYSTEM, status=TaskStatus.READY)
    b = task_create(
        project=api, title=SECRET_TITLE, description=SECRET_TEXT, actor=SYSTEM, status=TaskStatus.READY, blocked_by=[a]
    )
    c = task_create(project=web, title="Web C", actor=SYSTEM, status=TaskStatus.READY, blocked_by=[b])
    return {"web": web, "api": api, "a": a, "b": b, "c": c, "web_agent": AgentFactory(projects=[web])}


def _claimable(agent, key: str) -> bool:
    body = client_for(agent).get(f"/api/v1/tasks/{key}/").json()
    return body["unresolved_blockers"] == 0


def test_c_is_not_claimable_until_b_of_another_project_is_done_not_merely_delivered(chain):
    agent, b = chain["web_agent"], chain["b"]
    assert _claimable(agent, chain["c"].key) is False
    refused = client_for(agent).post(f"/api/v1/tasks/{chain['c'].key}/claim/", {}, format="json")
    assert_error(refused, 409, "TASK_NOT_CLAIMABLE")
    Task.objects.filter(pk=b.pk).update(status=TaskStatus.DELIVERED, delivered_commit="a" * 40)
    assert _claimable(agent, chain["c"].key) is False
    Task.objects.filter(pk=b.pk).update(status=TaskStatus.DONE)
    assert _claimable(agent, chain["c"].key) is True
    claimed = client_for(agent).post(f"/api/v1/tasks/{chain['c'].key}/claim/", {}, format="json")
    assert claimed.status_code == 201, claimed.content


def test_a_cycle_across_projects_is_refused_with_its_path(chain):
    a, c = chain["a"], chain["c"]
    with pytest.raises(DependencyCycle) as refused:
        dependency_add(task=a, blocked_by=c, actor=SYSTEM)
    assert refused.value.code == "DEPENDENCY_CYCLE"
    assert refused.value.details["path"] == [a.key, c.key, chain["b"].key, a.key]


def test_a_cycle_across_projects_through_the_api_answers_dependency_cycle(chain):
    """An agent of both projects names the other project's task; the cycle is refused with its path."""
    both = AgentFactory(projects=[chain["web"], chain["api"]])
    client = client_for(both)
    url = f"/api/v1/tasks/{chain['a'].key}/dependencies/"
    response = client.post(url, {"blocked_by": chain["c"].key}, format="json")
    error = assert_error(response, 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == [chain["a"].key, chain["c"].key, chain["b"].key, chain["a"].key]


def test_an_agent_of_web_sees_b_only_as_a_stub(chain):
    agent, b, c = chain["web_agent"], chain["b"], chain["c"]
    client = client_for(agent)
    assert_error(client.get(f"/api/v1/tasks/{b.key}/"), 404, "NOT_FOUND")
    read = client.get(f"/api/v1/tasks/{c.key}/")
    context = client.get(f"/api/v1/tasks/{c.key}/context/")
    graph = client.get(f"/api/v1/tasks/{c.key}/graph/")
    project_graph = client.get("/api/v1/projects/web2/graph/")
    for response in (read, context, graph, project_graph):
        assert response.status_code == 200, response.content
        text = json.dumps(response.json())
        assert b.key in text
        assert SECRET_TITLE not in text
        assert SECRET_TEXT not in text
    assert context.json()["blockers"] == [{"key": b.key, "status": "ready", "stub": True}]
    [node] = [node for node in graph.json()["nodes"] if node["key"] == b.key]
    assert node["title"] == ""
    assert node["effective_status"] == "ready"
    assert [b.key, c.key] in [list(edge) for edge in graph.json()["edges"]]
    assert b.key in [node["key"] for node in project_graph.json()["nodes"]]
    assert_error(client.get(f"/api/v1/tasks/{b.key}/context/"), 404, "NOT_FOUND")
