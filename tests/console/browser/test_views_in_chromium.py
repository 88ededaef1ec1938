"""Issue 32's views in Chromium: the task list and the board at 390 px, no clipping at 1400 px, the graph fits."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from leases.services import lease_claim
from ledger.actors import SYSTEM
from ledger.services import dependency_add
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.factories import AgentFactory, FindingFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


@pytest.fixture
def busy_project():
    project = ProjectFactory(slug="web", name="Web app")
    agent = AgentFactory(handle="agent-with-a-long-handle-07", projects=[project])
    tasks = [
        TaskFactory(project=project, title=f"Make the {n}th page readable on a phone, with a title long enough to wrap")
        for n in range(8)
    ]
    for task in tasks[:3]:
        lease_claim(task=task, agent=agent, lease_seconds=600)
    for blocked, blocker in zip(tasks[3:], tasks[:5], strict=False):
        dependency_add(task=blocked, blocked_by=blocker, actor=SYSTEM)
    FindingFactory(project=project, subject_key="lh/orphan-branch-with-a-long-name-left-behind-by-an-agent")
    return project, tasks


def overflow_of(page: Page, selector: str = "") -> int:
    if not selector:
        return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))
    return int(
        page.evaluate(
            f"(() => {{ const e = document.querySelector('{selector}'); return e.scrollWidth - e.clientWidth; }})()"
        )
    )


def test_the_task_list_and_the_board_at_390_px(page, superuser, busy_project):
    project, tasks = busy_project
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, "root")
    page.goto("/admin/ledger/task/")
    expect(page.locator("#result_list")).to_contain_text(tasks[0].key)
    assert overflow_of(page) <= 0, "the page scrolls sideways"
    assert overflow_of(page, "#changelist .results") <= 0, "the task table scrolls sideways: columns hidden"
    first_row = page.locator("#result_list tbody tr").first
    box = first_row.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= 390
    screenshot(page, "task-list-390.png")

    page.goto(f"/admin/ledger/task/board/{project.slug}/?refresh=off")
    expect(page.locator("#lh-column-in_progress")).to_contain_text(tasks[0].key)
    assert overflow_of(page) <= 0
    ready = page.locator("#lh-column-ready").bounding_box()
    in_progress = page.locator("#lh-column-in_progress").bounding_box()
    assert ready is not None
    assert in_progress is not None
    assert in_progress["y"] > ready["y"], "the columns stack on a phone"
    screenshot(page, "board-390.png")


def test_no_clipping_at_1400_px_and_the_graph_fits(page, superuser, busy_project):
    project, tasks = busy_project
    page.set_viewport_size({"width": 1400, "height": 900})
    login(page, "root")
    for url in ("/admin/ledger/task/", "/admin/reconciliation/finding/"):
        page.goto(url)
        expect(page.locator("#changelist")).to_be_visible()
        assert overflow_of(page, "#changelist .results") <= 0, f"{url} clips its columns at 1400 px"
        assert overflow_of(page) <= 0
    screenshot(page, "task-list-1400.png")
    # A wide graph: fourteen blockers side by side in one layer.
    for number in range(14):
        blocker = TaskFactory(project=project, title=f"Blocker {number}")
        dependency_add(task=tasks[4], blocked_by=blocker, actor=SYSTEM)
    page.goto(f"/admin/ledger/task/{tasks[4].pk}/change/")
    graph = page.locator("#dependency-graph svg")
    expect(graph).to_be_visible()
    svg_box = graph.bounding_box()
    card_box = page.locator("#dependency-graph").bounding_box()
    assert svg_box is not None
    assert card_box is not None
    assert svg_box["x"] + svg_box["width"] <= card_box["x"] + card_box["width"] + 1, "the graph is cut"
    assert overflow_of(page, "#dependency-graph .lh-graph-scroll") <= 0
    screenshot(page, "task-graph-1400.png")
