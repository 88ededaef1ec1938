"""Dependencies across projects (SPEC §22): a task may wait for a task of another project on the same
server; only `done` (landed) resolves it; cycles across projects are refused with their path; an agent
of one project sees the other project's task as a stub (key and status, no title or text)."""

from __future__ import annotations

import io
import json

import pytest

from agent.cli.context_text import human
from agent.cli.task_commands import task_text
from agent.workspace.briefing import context_markdown
from core.errors import DependencyCycle
from ledger.actors import SYSTEM
from ledger.models import EventType, Task, TaskDependency, TaskStatus
from ledger.services import dependency_add, task_create
from operations.transfer.export import project_export
from operations.transfer.importing import project_import
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
    assert context.json()["blockers"] == [{"key": b.key, "effective_status": "ready", "stub": True}]
    [node] = [node for node in graph.json()["nodes"] if node["key"] == b.key]
    assert node["title"] == ""
    assert node["effective_status"] == "ready"
    assert [b.key, c.key] in [list(edge) for edge in graph.json()["edges"]]
    assert b.key in [node["key"] for node in project_graph.json()["nodes"]]
    assert_error(client.get(f"/api/v1/tasks/{b.key}/context/"), 404, "NOT_FOUND")


# --- no leak to a non-member, anywhere (SPEC §22) -------------------------------------------------

HIDDEN_TITLE = "Hidden vault rotation"


@pytest.fixture
def held_b(chain):
    """A is done, B is held by an agent of `api` (effective `in_progress`, stored `ready`), and B also waits
    for D, a second task of `api` the agent of `web` has no business seeing at all."""
    d = task_create(project=chain["api"], title=HIDDEN_TITLE, description=SECRET_TEXT, actor=SYSTEM)
    dependency_add(task=chain["b"], blocked_by=d, actor=SYSTEM)
    Task.objects.filter(pk__in=[chain["a"].pk, d.pk]).update(status=TaskStatus.DONE)
    claimed = client_for(AgentFactory(projects=[chain["api"]])).post(f"/api/v1/tasks/{chain['b'].key}/claim/", {})
    assert claimed.status_code == 201, claimed.content
    return {**chain, "d": d}


def test_the_task_read_gives_a_foreign_blockers_effective_status(held_b):
    body = client_for(held_b["web_agent"]).get(f"/api/v1/tasks/{held_b['c'].key}/").json()
    assert body["blocked_by"] == [{"key": held_b["b"].key, "status": "ready", "effective_status": "in_progress"}]


def test_the_context_stub_is_the_key_and_the_effective_status(held_b):
    context = client_for(held_b["web_agent"]).get(f"/api/v1/tasks/{held_b['c'].key}/context/").json()
    assert context["blockers"] == [{"key": held_b["b"].key, "effective_status": "in_progress", "stub": True}]


def test_the_task_graph_stops_at_a_stub_and_lists_nothing_beyond_it(held_b):
    client = client_for(held_b["web_agent"])
    up = client.get(f"/api/v1/tasks/{held_b['c'].key}/graph/?direction=up&depth=5").json()
    keys = {node["key"] for node in up["nodes"]}
    assert keys == {held_b["c"].key, held_b["b"].key}  # not D (api), nor A reached through B
    down = client.get(f"/api/v1/tasks/{held_b['a'].key}/graph/?direction=down&depth=5").json()
    assert {node["key"] for node in down["nodes"]} == {held_b["a"].key, held_b["b"].key}
    for graph in (up, down):
        text = json.dumps(graph)
        assert held_b["d"].key not in text
        assert HIDDEN_TITLE not in text
        assert SECRET_TITLE not in text
    [stub] = [node for node in up["nodes"] if node["key"] == held_b["b"].key]
    assert stub["effective_status"] == "in_progress"
    # staff (every project) walks on
    both = AgentFactory(projects=[held_b["web"], held_b["api"]])
    whole = client_for(both).get(f"/api/v1/tasks/{held_b['c'].key}/graph/?direction=up&depth=5").json()
    assert held_b["d"].key in {node["key"] for node in whole["nodes"]}


def test_the_changes_feed_of_web_carries_no_title_of_the_api_task(held_b):
    both = client_for(AgentFactory(projects=[held_b["web"], held_b["api"]]))
    extra = task_create(project=held_b["web"], title="Web E", actor=SYSTEM)
    added = both.post(f"/api/v1/tasks/{extra.key}/dependencies/", {"blocked_by": held_b["b"].key}, format="json")
    assert added.status_code == 200, added.content
    feed = client_for(held_b["web_agent"]).get("/api/v1/changes/?limit=200").json()
    text = json.dumps(feed)
    assert EventType.TASK_DEPENDENCY_ADDED in text
    assert held_b["b"].key in text
    assert SECRET_TITLE not in text
    assert SECRET_TEXT not in text
    assert HIDDEN_TITLE not in text


def test_the_export_names_a_foreign_blocker_by_key_and_the_import_reads_it_without_linking(held_b):
    out = io.StringIO()
    counts = project_export(project=held_b["web"], out=out)
    text = out.getvalue()
    assert SECRET_TITLE not in text
    assert SECRET_TEXT not in text
    assert HIDDEN_TITLE not in text
    rows = [json.loads(line) for line in text.splitlines()]
    assert held_b["b"].key not in {row.get("key") for row in rows if row["type"] == "task"}
    assert [row for row in rows if row["type"] == "dependency"] == []  # C → B is the only edge of web's tasks
    [external] = [row for row in rows if row["type"] == "external_dependency"]
    assert external["task"] == held_b["c"].pk
    assert external["blocked_by_key"] == held_b["b"].key
    assert counts["external_dependency"] == 1
    result = project_import(lines=text.splitlines(), slug="web-copy", key_prefix="WCP")
    assert result.counts["external_dependency"] == 1
    copied = Task.objects.get(project__slug="web-copy", number=held_b["c"].number)
    assert not TaskDependency.objects.filter(task=copied).exists()


def test_the_agents_human_output_shows_a_stub_by_key_and_effective_status(held_b):
    client = client_for(held_b["web_agent"])
    task = client.get(f"/api/v1/tasks/{held_b['c'].key}/").json()
    context = client.get(f"/api/v1/tasks/{held_b['c'].key}/context/").json()
    assert f"Blocked by: {held_b['b'].key} (in_progress)" in task_text(task)
    assert f"Unresolved blockers: {held_b['b'].key} (another project, in_progress)" in human(context)
    assert f"- {held_b['b'].key} (another project): in_progress" in context_markdown(context, where={})
    for rendered in (task_text(task), human(context), context_markdown(context, where={})):
        assert SECRET_TITLE not in rendered
        assert HIDDEN_TITLE not in rendered
