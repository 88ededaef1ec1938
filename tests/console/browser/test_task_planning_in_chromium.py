"""Planning on the task page in real Chromium (issue 15): edit a priority, add a dependency, clear a
reservation, cancel a held task with force-release, and the task page at 375 px without sideways scroll."""

from __future__ import annotations

import pytest
from playwright.sync_api import FloatRect, Locator, Page, expect

from leases.models import Attempt
from leases.services import lease_claim, task_reassign
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task, TaskDependency
from ledger.services import dependency_add
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


def test_editing_a_tasks_priority(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    task = TaskFactory(project=project, title="Fix the search copy", priority=1)
    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.click("text=Edit…")
    expect(page.locator("#lh-edited-version")).to_have_text("1")
    page.fill("#id_priority", "8")
    screenshot(page, "task-edit.png")
    page.click("#lh-edit-save")
    expect(page.locator(".messagelist")).to_contain_text("Saved WEB-1: priority (now version 2)")
    expect(page.locator(".lh-summary")).to_contain_text("8")
    assert Task.objects.get(pk=task.pk).priority == 8

    # A second tab's stale edit is refused, nothing saved.
    page.goto(f"/admin/ledger/task/{task.pk}/edit/")
    stale = page.context.new_page()
    stale.goto(f"/admin/ledger/task/{task.pk}/edit/")
    page.fill("#id_title", "Fix the search copy, again")
    page.click("#lh-edit-save")
    stale.fill("#id_priority", "2")
    stale.click("#lh-edit-save")
    expect(stale.locator("#lh-edit-refused")).to_contain_text("you edited version 2, it is now version 3")
    screenshot(stale, "task-edit-stale.png")
    assert Task.objects.get(pk=task.pk).priority == 8


def test_adding_a_dependency_and_the_cycle_message(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    task = TaskFactory(project=project, title="Ship the new search")
    blocker = TaskFactory(project=project, title="Index the catalogue")
    holder = AgentFactory(handle="agent-07", projects=[project])
    lease_claim(task=blocker, agent=holder)
    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.fill("#lh-blocked-by", blocker.key)
    page.click("#lh-dependency-add-button")
    expect(page.locator(".messagelist")).to_contain_text(f"{task.key} now waits for {blocker.key}")
    # The blocker is held: its effective status, not its stored "Ready".
    expect(page.locator("#dependencies")).to_contain_text("In progress")
    expect(page.locator(".lh-summary")).to_contain_text("blocked by 1")
    screenshot(page, "task-dependency-added.png")
    assert TaskDependency.objects.filter(task=task, blocked_by=blocker, removed_at__isnull=True).exists()

    page.goto(f"/admin/ledger/task/{blocker.pk}/change/")
    page.fill("#lh-blocked-by", task.key)
    page.click("#lh-dependency-add-button")
    expect(page.locator(".messagelist")).to_contain_text(f"The cycle: {blocker.key} → {task.key} → {blocker.key}.")

    page.goto("/admin/ledger/task/queue/web/")
    expect(page.locator("#lh-queue")).to_contain_text("blocked by 1")
    screenshot(page, "task-queue.png")
    page.goto("/admin/ledger/task/")
    expect(page.locator("#result_list")).to_contain_text("Ready (blocked)")
    screenshot(page, "task-list.png")

    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.click("#dependencies button:has-text('Remove')")
    expect(page.locator(".messagelist")).to_contain_text(f"{task.key} no longer waits for {blocker.key}")
    expect(page.locator("#dependencies")).to_contain_text("waits for no task")


def test_clearing_a_reservation(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    task = TaskFactory(project=project, title="Tidy the footer")
    reserved = AgentFactory(handle="agent-09", projects=[project])
    task_reassign(task=task, agent=reserved, actor=SYSTEM, reason="agent-09 knows the footer")
    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    expect(page.locator(".lh-summary")).to_contain_text("only agent-09")
    page.click("#lh-clear-reservation")
    expect(page.locator(".messagelist")).to_contain_text("no longer reserved for agent-09")
    expect(page.locator(".lh-summary")).to_contain_text("claimable")
    expect(page.locator("#lh-clear-reservation")).to_have_count(0)
    screenshot(page, "task-reservation-cleared.png")
    assert Task.objects.get(pk=task.pk).reserved_for_id is None
    assert Event.objects.filter(type=EventType.TASK_RESERVATION_CLEARED, task=task).count() == 1


def test_cancel_with_force_release(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    task = TaskFactory(project=project, title="Rewrite the pager")
    grant = lease_claim(task=task, agent=AgentFactory(handle="agent-07", projects=[project]))
    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.click("text=Cancel…")
    expect(page.locator("h1")).to_contain_text("Cancel 1 task")
    expect(page.locator("#id_also_release")).to_be_checked()
    expect(page.locator(".lh-confirm")).to_contain_text("agent-07")
    screenshot(page, "confirm-cancel.png")
    page.check("#id_process_gone")  # force-release's safeguard holds on the cancel page too
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text("1 task cancelled. Revoked 1 live lease.")
    expect(page.locator(".lh-summary")).to_contain_text("Cancelled")
    expect(page.locator("#timeline")).to_contain_text(EventType.ATTEMPT_REVOKED)
    assert Attempt.objects.get(pk=grant.attempt.pk).status == "revoked"
    assert Task.objects.get(pk=task.pk).status == "cancelled"


def box_of(locator: Locator) -> FloatRect:
    box = locator.bounding_box()
    assert box is not None, "not rendered"
    return box


def no_sideways_scroll(page: Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls {overflow} px sideways"


def test_the_task_page_at_375_px(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    task = TaskFactory(project=project, title="Make the timeline readable on a phone")
    blocker = TaskFactory(project=project, title="A blocker with a long enough title to wrap")
    holder = AgentFactory(handle="agent-07", projects=[project])
    lease_claim(task=task, agent=holder)
    dependency_add(task=task, blocked_by=blocker, actor=SYSTEM)
    page.set_viewport_size({"width": 375, "height": 812})
    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    expect(page.locator("#timeline")).to_contain_text(EventType.ATTEMPT_CLAIMED)
    timeline = page.locator("#timeline li").first
    time_box = box_of(timeline.locator("time"))
    type_box = box_of(timeline.locator("a.lh-mono"))
    # Stacked: the event type sits below the time, not in a 200 px column beside a 170 px one.
    assert type_box["y"] >= time_box["y"] + time_box["height"] - 1
    assert box_of(timeline)["x"] + box_of(timeline)["width"] <= 375
    no_sideways_scroll(page)
    screenshot(page, "task-page-375.png")

    page.click("text=Force-release…")
    expect(page.locator("h1")).to_contain_text("Force-release 1 task")
    tick = page.locator("#id_process_gone")
    expect(tick).to_be_visible()
    assert box_of(tick)["x"] + box_of(tick)["width"] <= 375
    for label in ("Status", "Holder", "Lease left"):
        cell = page.locator(f'td[data-label="{label}"]').first
        expect(cell).to_be_visible()
        assert box_of(cell)["x"] + box_of(cell)["width"] <= 375
    no_sideways_scroll(page)
    screenshot(page, "confirm-force-release-375.png")

    page.goto("/admin/")
    no_sideways_scroll(page)
    screenshot(page, "dashboard-375.png")
