"""`GET /tasks/{key}/graph/` and `GET /projects/{slug}/graph/` (SPEC §17): bounded, no free text, Mermaid."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import Task, TaskDependency
from tests.api.conftest import COMPACT_KEYS, assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def depend(task, blocked_by, clock):
    TaskDependency.objects.create(task=task, blocked_by=blocked_by, created_at=clock.now())


@pytest.fixture
def chain(project, clock):
    """a ← b ← c ← d ← e (e waits for d, …, b waits for a); x waits for c too; a is done."""
    tasks = {name: TaskFactory(project=project, title=f"Task {name}", status="ready") for name in "abcdex"}
    Task.objects.filter(pk=tasks["a"].pk).update(status="done")
    for blocked, blocker in ("ba", "cb", "dc", "ed", "xc"):
        depend(tasks[blocked], tasks[blocker], clock)
    return tasks


def graph(client, key, **query):
    return client.get(f"/api/v1/tasks/{key}/graph/", query)


def test_a_task_graph_walks_up_down_and_both_within_depth(client, chain):
    keys = {name: task.key for name, task in chain.items()}
    up = graph(client, keys["d"], direction="up").json()
    assert [node["key"] for node in up["nodes"]] == [keys["d"], keys["c"], keys["b"], keys["a"]]
    assert sorted(map(tuple, up["edges"])) == sorted(
        [(keys["c"], keys["d"]), (keys["b"], keys["c"]), (keys["a"], keys["b"])]
    )
    assert up["truncated"] is False
    # b's only blocker is done: b is where work starts; a is done, c and d wait.
    assert up["entry_points"] == [keys["b"]]
    assert {node["key"]: node["claimable"] for node in up["nodes"]}[keys["b"]] is True

    down = graph(client, keys["c"], direction="down", depth=1).json()
    assert {node["key"] for node in down["nodes"]} == {keys["c"], keys["d"], keys["x"]}
    assert down["entry_points"] == []

    both = graph(client, keys["c"], direction="both", depth=1).json()
    assert {node["key"] for node in both["nodes"]} == {keys["b"], keys["c"], keys["d"], keys["x"]}
    assert set(both["nodes"][0]) == COMPACT_KEYS


def test_max_nodes_truncates_nearest_first(client, chain):
    body = graph(client, chain["e"].key, direction="up", depth=10, max_nodes=2).json()
    assert [node["key"] for node in body["nodes"]] == [chain["e"].key, chain["d"].key]
    assert body["truncated"] is True
    assert body["edges"] == [[chain["d"].key, chain["e"].key]]


@pytest.mark.parametrize(
    "query",
    [
        {"depth": 0},
        {"depth": 11},
        {"max_nodes": 0},
        {"max_nodes": 501},
        {"direction": "sideways"},
        {"depth": "three"},
        {"colour": "red"},
    ],
)
def test_bad_bounds_are_validation_errors(client, chain, query):
    assert_error(graph(client, chain["a"].key, **query), 400, "VALIDATION_ERROR")


def test_bad_bounds_answer_the_json_envelope_with_format_mermaid(client, chain):
    response = graph(client, chain["a"].key, depth=99, format="mermaid")
    assert_error(response, 400, "VALIDATION_ERROR")


def test_graphs_of_what_the_agent_cannot_see_are_not_found(chain, project):
    stranger = client_for(AgentFactory(projects=[ProjectFactory(slug="theirs")]))
    assert_error(graph(stranger, chain["a"].key), 404, "NOT_FOUND")
    assert_error(stranger.get(f"/api/v1/projects/{project.slug}/graph/"), 404, "NOT_FOUND")


def test_no_free_text_at_any_size(client, project, clock):
    huge = "x" * 10_240
    root = TaskFactory(project=project, title="Root", description=huge, acceptance_criteria=huge)
    for i in range(20):
        child = TaskFactory(
            project=project,
            title=f"Child {i}",
            description=huge,
            acceptance_criteria=huge,
            status="blocked",
            blocked_reason=huge,
        )
        depend(child, root, clock)
    for response in (
        graph(client, root.key, direction="down"),
        client.get(f"/api/v1/projects/{project.slug}/graph/"),
        graph(client, root.key, direction="down", format="mermaid"),
    ):
        assert response.status_code == 200
        assert len(response.content) < 12_000, len(response.content)
        assert b"xxxxxxxxxx" not in response.content


def build_project(project, clock, count: int) -> list[Task]:
    """`count` tasks, each blocked by the one before it and by the one ten before (a long, wide graph)."""
    tasks = Task.objects.bulk_create(
        Task(
            project=project,
            number=i,
            key=f"{project.key_prefix}-{i}",
            title=f"Step {i}",
            status="ready",
            created_at=clock.now(),
            updated_at=clock.now(),
        )
        for i in range(1, count + 1)
    )
    TaskDependency.objects.bulk_create(
        TaskDependency(task=tasks[i], blocked_by=tasks[j], created_at=clock.now())
        for i in range(1, count)
        for j in {i - 1, max(i - 10, 0)}
    )
    return tasks


def test_at_a_thousand_tasks_bounds_hold_and_statements_are_bounded(client, project, clock):
    tasks = build_project(project, clock, 1000)
    middle = tasks[500].key
    with CaptureQueriesContext(connection) as deep:
        body = graph(client, middle, direction="both", depth=10, max_nodes=500).json()
    assert len(body["nodes"]) <= 500
    assert body["truncated"] is False  # 10 steps either way reach 10 + 100 nodes at most
    keys = {node["key"] for node in body["nodes"]}
    assert all(blocker in keys and blocked in keys for blocker, blocked in body["edges"])
    deep_statements = len(deep)
    with CaptureQueriesContext(connection) as shallow:
        graph(client, middle, direction="both", depth=1)
    # One statement per level, not per node: ten more levels cost nine more statements.
    assert deep_statements - len(shallow) == 9, (deep_statements, len(shallow))
    assert deep_statements <= 16

    with CaptureQueriesContext(connection) as whole:
        body = client.get(f"/api/v1/projects/{project.slug}/graph/", {"max_nodes": 500}).json()
    # Counted at once: the next request outside a capture clears the connection's query log.
    project_statements = len(whole)
    assert 3 <= project_statements <= 8, [q["sql"][:80] for q in whole.captured_queries]
    assert len(body["nodes"]) == 500
    assert body["truncated"] is True
    assert body["entry_points"] == [tasks[0].key]
    default = client.get(f"/api/v1/projects/{project.slug}/graph/").json()
    assert len(default["nodes"]) == 100

    wide = graph(client, tasks[0].key, direction="down", depth=10, max_nodes=50).json()
    assert len(wide["nodes"]) == 50
    assert wide["truncated"] is True


# What `mermaid()` emits, and nothing else: a header, node lines, edge lines, class lines, a comment.
MERMAID_LINE = re.compile(
    r"^(?:flowchart TD"
    r'|    t_[A-Z][A-Z0-9]*_[0-9]+\["(?:[A-Za-z0-9 _.,:;!?()/+=*\'@-]|#[0-9]+;)*"\]:::[a-z_]+'
    r"|    t_[A-Z][A-Z0-9]*_[0-9]+ --> t_[A-Z][A-Z0-9]*_[0-9]+"
    r"|    classDef [a-z_]+ fill:#[0-9a-f]{6},stroke:#[0-9a-f]{6},color:#[0-9a-f]{6}"
    r"|    %% truncated: showing [0-9]+ of [0-9]+ or more)$"
)


def test_mermaid_is_a_flowchart_with_every_label_escaped(client, project, clock):
    nasty = TaskFactory(project=project, title='Quote " and ]"] --> end; <b>bold</b> #1 `code` 100%\nnewline')
    plain = TaskFactory(project=project, title="Plain")
    depend(plain, nasty, clock)
    response = graph(client, plain.key, format="mermaid")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    text = response.content.decode()
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == "flowchart TD"
    bad = [line for line in lines if not MERMAID_LINE.match(line)]
    assert not bad, bad
    node_ids = {line.split("[", 1)[0].strip() for line in lines if '["' in line}
    assert node_ids == {"t_" + plain.key.replace("-", "_"), "t_" + nasty.key.replace("-", "_")}
    edge = f"    t_{nasty.key.replace('-', '_')} --> t_{plain.key.replace('-', '_')}"
    assert edge in lines
    assert "#34;" in text  # the quote, as an entity
    assert "<b>" not in text
    assert "\nnewline" not in text
    classes = {line.rsplit(":::", 1)[1] for line in lines if ":::" in line}
    defined = {line.split()[1] for line in lines if line.strip().startswith("classDef")}
    assert classes <= defined
