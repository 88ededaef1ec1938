"""The dependency graph on the task and project pages (SPEC §17): server-rendered SVG, layered, escaped, bounded."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import pytest

from console.reports.graph import ADMIN_GRAPH_NODES, layers_of
from ledger.models import Task, TaskDependency
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


def graph_svg(html: str) -> ElementTree.Element:
    """The page's graph, parsed as XML: it must be well-formed on its own (no script, escaped text)."""
    found = re.search(r'<svg class="lh-graph".*?</svg>', html, flags=re.DOTALL)
    assert found, "no graph on the page"
    return ElementTree.fromstring(found.group(0))  # noqa: S314 - our own page, parsed to prove it well-formed


def nodes_of(svg: ElementTree.Element) -> dict[str, tuple[float, float, str]]:
    """Each node's key: its rectangle's x, y and its link's classes."""
    found = {}
    for link in svg.iter(f"{SVG}a"):
        rect = link.find(f"{SVG}rect")
        key = link.find(f"{SVG}text")
        assert rect is not None
        assert key is not None
        found[key.text or ""] = (float(rect.get("x", 0)), float(rect.get("y", 0)), link.get("class", ""))
    return found


def depend(task, blocker, clock):
    TaskDependency.objects.create(task=task, blocked_by=blocker, created_at=clock.now())


def test_longest_path_layering_puts_every_blocker_above_what_waits_for_it():
    edges = [("A", "B"), ("B", "C"), ("A", "C"), ("C", "D"), ("X", "D")]
    assert layers_of(["A", "B", "C", "D", "X"], edges) == {"A": 0, "B": 1, "C": 2, "D": 3, "X": 0}


def test_the_task_page_draws_its_graph_layered_coloured_and_escaped(ops_client, clock):
    project = ProjectFactory(slug="web")
    base = TaskFactory(project=project, title="Schema")
    Task.objects.filter(pk=base.pk).update(status="done")
    task = TaskFactory(project=project, title='<script>alert("x")</script> & more', status="ready")
    after = TaskFactory(project=project, title="Docs", status="blocked", blocked_reason="later")
    depend(task, base, clock)
    depend(after, task, clock)
    html = ops_client.get(f"/admin/ledger/task/{task.pk}/change/").content.decode()
    assert "<script>alert" not in html
    svg = graph_svg(html)
    nodes = nodes_of(svg)
    assert set(nodes) == {base.key, task.key, after.key}
    assert nodes[base.key][1] < nodes[task.key][1] < nodes[after.key][1]  # blockers above
    assert "lh-g-done" in nodes[base.key][2]
    assert "lh-g-ready" in nodes[task.key][2]
    assert "lh-graph-current" in nodes[task.key][2]
    assert "lh-g-blocked" in nodes[after.key][2]
    assert len(list(svg.iter(f"{SVG}line"))) == 2
    tooltips = [title.text for title in svg.iter(f"{SVG}title")]
    assert f'{task.key} <script>alert("x")</script> & more [ready]' in tooltips  # escaped, then read back
    assert not list(svg.iter(f"{SVG}script"))
    assert "3 tasks" in html


def test_the_project_page_shows_at_most_200_nodes_then_says_how_many_there_are(ops_client, clock):
    project = ProjectFactory(slug="big")
    tasks = Task.objects.bulk_create(
        Task(
            project=project,
            number=i,
            key=f"{project.key_prefix}-{i}",
            title=f"Step {i}",
            status="open",
            created_at=clock.now(),
            updated_at=clock.now(),
        )
        for i in range(1, 251)
    )
    TaskDependency.objects.bulk_create(
        TaskDependency(task=tasks[i], blocked_by=tasks[i - 1], created_at=clock.now()) for i in range(1, 250)
    )
    html = ops_client.get(f"/admin/ledger/project/{project.pk}/change/").content.decode()
    assert len(nodes_of(graph_svg(html))) == ADMIN_GRAPH_NODES
    assert "Showing 200 of 250 tasks" in html

    middle = tasks[125]
    html = ops_client.get(f"/admin/ledger/task/{middle.pk}/change/").content.decode()
    # Ten steps either way: 21 tasks, all shown.
    assert len(nodes_of(graph_svg(html))) == 21
    assert "21 tasks" in html
