"""The admin control plane, driven through real headless Chromium against a live server."""

from __future__ import annotations

import csv
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.urls import Resolver404, resolve
from playwright.sync_api import Page, expect

from core.errors import LeaseNotHeld, TaskNotClaimable
from leases.models import Attempt, AttemptStatus
from leases.services import HolderProof, attempt_finish, attempt_renew, lease_claim, task_update
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import Agent, Event, EventType
from ledger.permissions import MANAGERS
from ledger.selectors import agent_for_token
from ledger.services import event_append
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


def proof_of(grant) -> HolderProof:
    return HolderProof(
        attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=grant.attempt.agent
    )


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD)


@pytest.fixture
def manager(django_user_model):
    user = django_user_model.objects.create_user(username="boss", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=MANAGERS))
    return user


def seed_history(project, agents, *, days: int = 12) -> None:
    """Claims and finishes spread over past days, so the charts have something to draw."""
    now = clock.now()
    try:
        for offset in range(days, 0, -1):
            clock.freeze(now - timedelta(days=offset, hours=2))
            for index in range(offset % 4 + 1):
                task = TaskFactory(project=project, title=f"Past work {offset}-{index}")
                grant = lease_claim(task=task, agent=agents[index % len(agents)])
                clock.advance(600)
                if index % 3 != 2:
                    attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Shipped.")
            if offset % 3 == 0:
                contested = TaskFactory(project=project, title=f"Contested {offset}")
                lease_claim(task=contested, agent=agents[0])
                task_update(task=contested, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "Waiting"})
    finally:
        clock.unfreeze()


def renew_through_api_or_service(page: Page, grant) -> str:
    """The former holder renews; returns the error code it gets (the API when it is routed, else the service)."""
    path = f"/api/v1/attempts/{grant.attempt.pk}/renew/"
    try:
        resolve(path)
    except Resolver404:
        with pytest.raises(LeaseNotHeld) as refused:
            attempt_renew(proof=proof_of(grant))
        return refused.value.code
    response = page.request.post(
        path,
        headers={
            "Authorization": f"Bearer {grant.attempt.agent.api_token}",
            "X-Lease-Token": grant.token,
            "X-Lease-Epoch": str(grant.attempt.epoch),
            "Content-Type": "application/json",
        },
        data="{}",
    )
    assert response.status == 409, response.text()
    with pytest.raises(LeaseNotHeld):
        attempt_renew(proof=proof_of(grant))
    return response.json()["error"]["code"]


def read_csv(path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def run_action(page: Page, *, task_pk: int, action: str) -> None:
    page.check(f'input[name="_selected_action"][value="{task_pk}"]')
    page.select_option('select[name="action"]', action)
    page.click('button[name="index"]')


def test_admin_sees_the_dashboard_with_its_charts(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    agents = [AgentFactory(handle=f"agent-0{n}", projects=[project]) for n in range(1, 4)]
    seed_history(project, agents)
    live = TaskFactory(project=project, title="Rewrite the search copy", priority=5)
    lease_claim(task=live, agent=agents[1], lease_seconds=240)
    TaskFactory(project=project, title="Waiting for a taker")
    event_append(type=EventType.TASK_QUEUE_WAIT_EXCEEDED, severity="warn", actor=SYSTEM, at=clock.now(), task=live)

    login(page, "root")
    expect(page.locator("h1")).to_contain_text("Fleet dashboard")
    charts = page.locator("svg.lh-chart")
    expect(charts).to_have_count(3)
    assert charts.nth(0).locator("rect").count() > 5
    expect(page.locator("#lh-status-table")).to_contain_text("Web app")
    expect(page.locator("#lh-expiring")).to_contain_text(live.key)
    # The alert names its task (issue 15): the queue-wait panel groups it under the task's key.
    expect(page.locator("#lh-queue-alerts")).to_contain_text(live.key)
    # seed_history's contested writes are days old: the 24-hour warnings panel leaves them to the conflicts chart.
    assert charts.nth(1).locator("rect").count() > 0
    expect(page.locator("#content-main")).to_contain_text("Tasks")  # the standard app list stays
    screenshot(page, "dashboard.png")


def test_force_release_needs_a_reason_and_the_tick_then_fences_the_holder(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    task = TaskFactory(project=project, title="Fix the search copy")
    grant = lease_claim(task=task, agent=holder)

    login(page, "root")
    page.goto("/admin/ledger/task/")
    expect(page.locator("#result_list")).to_contain_text("agent-07")
    run_action(page, task_pk=task.pk, action="force_release")
    expect(page.locator("h1")).to_contain_text("Force-release 1 task")
    expect(page.locator(".lh-confirm")).to_contain_text("I have confirmed the agent process is gone")
    screenshot(page, "confirm-force-release.png")

    submit = page.locator("#lh-confirm-submit")
    submit.click()  # neither
    expect(page.locator(".field-reason .errorlist")).to_contain_text("Give a reason")
    expect(page.locator(".field-process_gone .errorlist")).to_contain_text("Tick the box")
    page.fill("#id_reason", "Agent host rebooted; process confirmed dead.")
    submit.click()  # a reason, no tick
    expect(page.locator(".field-process_gone .errorlist")).to_contain_text("Tick the box")
    expect(page.locator(".field-reason .errorlist")).to_have_count(0)
    page.fill("#id_reason", "")
    page.check("#id_process_gone")
    submit.click()  # the tick, no reason
    expect(page.locator(".field-reason .errorlist")).to_contain_text("Give a reason")
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE

    page.fill("#id_reason", "Agent host rebooted; process confirmed dead.")
    page.check("#id_process_gone")
    submit.click()
    expect(page.locator(".messagelist")).to_contain_text("Force-released 1 task")
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    assert attempt.status == AttemptStatus.REVOKED
    assert attempt.revoked_by == "user:root"
    assert LogEntry.objects.filter(object_id=str(task.pk), change_message__startswith="Force-release").exists()

    assert renew_through_api_or_service(page, grant) == "LEASE_NOT_HELD"

    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    expect(page.locator("#timeline")).to_contain_text(EventType.ATTEMPT_REVOKED)
    expect(page.locator("#timeline")).to_contain_text("Agent host rebooted")
    page.locator("#timeline").scroll_into_view_if_needed()
    screenshot(page, "task-timeline.png")


def test_reassigned_task_can_be_claimed_by_the_chosen_agent_alone(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    chosen = AgentFactory(handle="agent-09", projects=[project])
    bystander = AgentFactory(handle="agent-11", projects=[project])
    task = TaskFactory(project=project, title="Migrate the billing table")
    grant = lease_claim(task=task, agent=holder)

    login(page, "root")
    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    page.click("text=Reassign…")
    expect(page.locator("h1")).to_contain_text("Reassign 1 task")
    page.select_option("#id_agent", label="agent-09")
    page.fill("#id_reason", "agent-07 is wedged; agent-09 knows the billing schema.")
    page.check("#id_process_gone")
    screenshot(page, "confirm-reassign.png")
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text("Reassigned 1 task to agent-09")
    expect(page.locator(".lh-summary")).to_contain_text("agent-09")

    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.REVOKED
    for refused in (bystander, holder):
        with pytest.raises(TaskNotClaimable, match="reserved"):
            lease_claim(task=task, agent=refused)
    claimed = lease_claim(task=task, agent=chosen)
    assert claimed.attempt.agent == chosen


def test_a_new_agent_token_is_shown_once(page, superuser):
    project = ProjectFactory(slug="web", name="Web app")
    login(page, "root")
    page.goto("/admin/ledger/agent/")
    page.click(".object-tools a.addlink")
    page.fill("#id_handle", "agent-42")
    page.select_option("#id_kind", "codex")
    page.check(f'input[name="projects"][value="{project.pk}"]')
    page.click("input[name=_save]")
    token_box = page.locator(".lh-token")
    expect(token_box).to_have_count(1)
    token = token_box.inner_text().strip()
    agent = Agent.objects.get(handle="agent-42")
    assert agent_for_token(token) == agent
    assert list(agent.projects.all()) == [project]
    screenshot(page, "agent-token.png")

    # Nowhere else: not on the list, the agent's page, its history, the dashboard or in any stored row.
    for path in ("/admin/ledger/agent/", f"/admin/ledger/agent/{agent.pk}/change/", "/admin/"):
        page.goto(path)
        assert token not in page.content()
    page.goto(f"/admin/ledger/agent/{agent.pk}/history/")
    assert token not in page.content()
    assert not LogEntry.objects.filter(change_message__contains=token).exists()
    assert not Event.objects.filter(payload__icontains=token[-20:]).exists()

    # Rotating shows the new one once, and the old one stops working.
    page.goto(f"/admin/ledger/agent/{agent.pk}/change/")
    page.click("text=Rotate token…")
    page.click("#lh-confirm-submit")
    rotated = page.locator(".lh-token").inner_text().strip()
    assert rotated != token
    assert agent_for_token(rotated) == agent
    assert agent_for_token(token) is None

    # Its projects change on a page of their own; the agent's page shows the result.
    docs = ProjectFactory(slug="docs", name="Docs")
    page.goto(f"/admin/ledger/agent/{agent.pk}/change/")
    page.click("text=Change projects…")
    expect(page.locator(f'input[name="projects"][value="{project.pk}"]')).to_be_checked()
    page.uncheck(f'input[name="projects"][value="{project.pk}"]')
    page.check(f'input[name="projects"][value="{docs.pk}"]')
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("added docs; removed web")
    expect(page.locator(".field-project_list")).to_contain_text("docs")
    assert list(agent.projects.all()) == [docs]


def test_a_manager_finds_no_way_to_change_or_delete_anything(page, manager):
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    task = TaskFactory(project=project, title="Fix the search copy")
    grant = lease_claim(task=task, agent=holder)

    login(page, "boss")
    expect(page.locator("svg.lh-chart")).to_have_count(3)
    pages = [
        "/admin/ledger/task/",
        f"/admin/ledger/task/{task.pk}/change/",
        "/admin/ledger/agent/",
        f"/admin/ledger/agent/{holder.pk}/change/",
        "/admin/ledger/project/",
        f"/admin/ledger/project/{project.pk}/change/",
        "/admin/ledger/event/",
        "/admin/environments/environment/",
        "/admin/leases/attempt/",
        f"/admin/leases/attempt/{grant.attempt.pk}/change/",
        "/admin/reconciliation/finding/",
        "/admin/leases/allocation/",
    ]
    for path in pages:
        response = page.goto(path)
        assert response is not None, path
        assert response.status == 200, path
        # (Read-only inlines keep Django's hidden "Add another" template row: only visible controls count.)
        for forbidden in ("a.deletelink", "a.addlink", "input[name=_save]", "input[name=_continue]"):
            expect(page.locator(f"{forbidden}:visible")).to_have_count(0)
        expect(page.locator(".object-tools a", has_text="Force-release")).to_have_count(0)
        expect(page.locator(".object-tools a", has_text="Reassign")).to_have_count(0)
        expect(page.locator(".object-tools a", has_text="Rotate")).to_have_count(0)
        if "/event/" not in path:
            expect(page.locator('select[name="action"]')).to_have_count(0)
    page.goto("/admin/ledger/event/")
    options = page.locator('select[name="action"] option').all_inner_texts()
    assert [text for text in options if text.strip("- ")] == ["Export selected events as CSV"]

    for path in (
        f"/admin/ledger/task/{task.pk}/force-release/",
        f"/admin/ledger/task/{task.pk}/reassign/",
        f"/admin/ledger/task/{task.pk}/delete/",
        f"/admin/ledger/agent/{holder.pk}/rotate-token/",
        "/admin/ledger/agent/add/",
        "/admin/environments/environment/add/",
    ):
        response = page.goto(path)
        assert response is not None, path
        assert response.status in (403, 404), path
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE


def test_events_export_as_csv_respecting_the_filters(page, manager):
    project = ProjectFactory(slug="web", name="Web app")
    agent = AgentFactory(handle="agent-07", projects=[project])
    for number in range(3):
        lease_claim(task=TaskFactory(project=project, title=f"Task {number}"), agent=agent)
    at = clock.now()
    event_append(type=EventType.TASK_UPDATED, actor=Actor(agent=agent), at=at, project=project, payload={"x": "=1+1"})
    claimed = Event.objects.filter(type=EventType.ATTEMPT_CLAIMED).count()
    assert claimed == 3

    login(page, "boss")
    page.goto("/admin/ledger/event/")
    page.locator("#changelist-filter a", has_text=EventType.ATTEMPT_CLAIMED).first.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(claimed)
    with page.expect_download() as download_info:
        page.click("#lh-export-csv")
    download = download_info.value
    assert download.suggested_filename.endswith(".csv")
    rows = read_csv(download.path())
    assert len(rows) == claimed
    assert {row["type"] for row in rows} == {EventType.ATTEMPT_CLAIMED}
    assert {row["actor"] for row in rows} == {"agent-07"}
    assert list(rows[0]) == [
        "id",
        "created_at",
        "type",
        "severity",
        "project",
        "task",
        "task_title",
        "attempt_id",
        "actor",
        "summary",
        "payload",
    ]

    page.goto("/admin/ledger/event/?type=task.updated")
    with page.expect_download() as download_info:
        page.click("#lh-export-csv")
    rows = read_csv(download_info.value.path())
    assert [row["payload"] for row in rows] == ['{"x":"=1+1"}']
