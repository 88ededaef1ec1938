"""The dependency graph on the project and task pages in real Chromium (SPEC §17): drawn, coloured, linked."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ledger.models import Task, TaskDependency
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


def test_the_project_graph_renders_layered_and_each_node_opens_its_task(page, superuser, clock):
    project = ProjectFactory(slug="web", name="Web app")
    titles = ["Design the schema", "Migrate", "Serve the API", "Admin pages", "Docs <b>&</b> notes", "Release"]
    tasks = [TaskFactory(project=project, title=title, status="ready") for title in titles]
    Task.objects.filter(pk=tasks[0].pk).update(status="done")
    for blocked, blocker in ((1, 0), (2, 1), (3, 1), (4, 2), (4, 3), (5, 4)):
        TaskDependency.objects.create(task=tasks[blocked], blocked_by=tasks[blocker], created_at=clock.now())
    login(page, "root")
    page.goto(f"/admin/ledger/project/{project.pk}/change/")
    graph = page.locator("svg.lh-graph")
    expect(graph).to_be_visible()
    expect(page.locator("#dependency-graph")).to_contain_text("6 tasks")
    assert graph.locator("a").count() == 6
    assert graph.locator("line").count() == 6
    box = graph.bounding_box()
    assert box is not None
    assert box["width"] > 300
    assert box["height"] > 200
    # Done is teal, ready is green: the fill comes from the page's stylesheet.
    done_fill = graph.locator("a.lh-g-done rect").evaluate("node => getComputedStyle(node).fill")
    ready_fill = graph.locator("a.lh-g-ready rect").first.evaluate("node => getComputedStyle(node).fill")
    assert done_fill != ready_fill
    expect(graph.locator("a", has_text="Docs <b>&</b>")).to_have_count(1)  # shown as text, not markup
    screenshot(page, "project-graph.png")

    graph.locator("a", has_text=tasks[2].key).click()
    page.wait_for_url(f"**/admin/ledger/task/{tasks[2].pk}/change/")
    expect(page.locator("svg.lh-graph a.lh-graph-current")).to_contain_text(tasks[2].key)
    screenshot(page, "task-graph.png")
