"""Operations pages in real Chromium: agent health, job-health tiles, a finding's action button, tables at 1400 px."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from environments.models import EnvironmentStatus
from environments.services import environment_create
from leases import jobs
from leases.models import Attempt, AttemptStatus
from leases.services import lease_claim, note_add, task_update
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.permissions import LEDGER_ADMINS
from ledger.services import agent_heartbeat, event_append
from reconciliation.jobs import reconcile_job
from reconciliation.models import Condition, Finding, SubjectType
from tests.console.browser.conftest import login, screenshot
from tests.console.conftest import PASSWORD
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="ops", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=LEDGER_ADMINS))
    return user


@pytest.fixture
def frozen():
    clock.freeze(clock.now().replace(microsecond=0))
    yield clock
    clock.unfreeze()


@pytest.fixture
def fleet(frozen):
    web = ProjectFactory(slug="web", name="Web app", queue_wait_max_seconds=600)
    busy = AgentFactory(handle="agent-07", projects=[web])
    quiet = AgentFactory(handle="agent-09", projects=[web])
    held = TaskFactory(project=web, title="Rewrite the search parser")
    grant = lease_claim(task=held, agent=busy, lease_seconds=1800)
    note_add(proof=proof_of(grant), kind="checkpoint", content="tokenizer done, parser half way")
    second = lease_claim(task=TaskFactory(project=web, title="Fix the footer links"), agent=busy, lease_seconds=1800)
    agent_heartbeat(agent=quiet)
    for n in range(7):
        TaskFactory(project=web, title=f"Waiting task {n}")
    frozen.advance(20 * 60)
    agent_heartbeat(agent=busy)
    from leases.services import check_queue_wait

    check_queue_wait()
    task_update(task=held, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "contested on purpose"})
    return web, busy, quiet, held, grant, second


def test_agent_health_page_and_force_release_everything_an_agent_holds(page: Page, operator, fleet):
    _, _, _, held, grant, second = fleet
    login(page, "ops")
    page.goto("/admin/ledger/agent/")
    page.click("#lh-agent-health-link")
    row = page.locator("#agent-agent-07")
    expect(row).to_contain_text("alive")
    expect(row).to_contain_text(held.key)
    expect(row).to_contain_text("tokenizer done")
    expect(page.locator("#agent-agent-09")).to_contain_text("silent")
    screenshot(page, "agent-health.png")
    row.get_by_role("link", name="Force-release all…").click()
    expect(page.locator("#lh-liveness")).to_contain_text("agent-07: alive")
    expect(page.locator("#lh-liveness-warning")).to_contain_text("last minute")
    screenshot(page, "confirm-release-all.png")
    page.fill("#id_reason", "host rebooted")
    page.click("#lh-confirm-submit")
    expect(page.locator(".errorlist")).to_contain_text("Tick the box")
    page.fill("#id_reason", "host rebooted")
    page.check("#id_process_gone")
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text("Revoked 2 leases of agent-07")
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.REVOKED
    assert Attempt.objects.get(pk=second.attempt.pk).status == AttemptStatus.REVOKED


def test_job_health_tiles_turn_red_when_the_sweep_is_stale(page: Page, operator, fleet, frozen):
    jobs.sweep_expired_job()
    reconcile_job()
    login(page, "ops")
    page.goto("/admin/")
    expect(page.locator("#lh-tile-scheduler")).to_contain_text("alive")
    expect(page.locator("#lh-tile-sweep_expired")).not_to_have_class("lh-stat lh-stat-alert")
    expect(page.locator("#lh-queue-alerts")).to_contain_text("ready and unclaimed for")
    expect(page.locator("#lh-tile-queue-wait .lh-stat-value")).to_have_text("7")
    screenshot(page, "dashboard-ops.png")
    frozen.advance(4 * 60)
    page.goto("/admin/")
    expect(page.locator("#lh-tile-sweep_expired")).to_have_class("lh-stat lh-stat-alert")
    expect(page.locator("#lh-tile-sweep_expired")).to_contain_text("stale")
    expect(page.locator("#lh-tile-scheduler")).to_contain_text("silent")
    screenshot(page, "job-tiles-stale.png")
    page.click("#lh-tile-sweep_expired")
    expect(page.locator("#job-sweep_expired")).to_contain_text("stale")
    screenshot(page, "job-health.png")


def test_a_findings_quarantine_button_goes_through_the_confirmation(page: Page, operator, fleet, frozen):
    web, *_ = fleet
    environment = environment_create(project=web, name="preview-db-3", kind="database", actor=SYSTEM)
    finding = Finding.objects.create(
        condition=Condition.LEAKED_ENVIRONMENT,
        project=web,
        subject_type=SubjectType.ENVIRONMENT,
        subject_key=environment.name,
        environment=environment,
        first_seen_at=clock.now() - timedelta(hours=3),
        last_seen_at=clock.now(),
    )
    login(page, "ops")
    page.goto("/admin/reconciliation/finding/")
    page.get_by_role("link", name="Leaked environment").first.click()
    expect(page.locator("#lh-remedy")).to_contain_text("quarantine the environment in the admin")
    screenshot(page, "finding-triage.png")
    page.click("#lh-triage-quarantine")
    expect(page.locator("h1")).to_contain_text("Quarantine 1 environment")
    page.fill("#id_reason", "leaked by a dead attempt; inspect first")
    page.click("#lh-confirm-submit")
    expect(page.locator(".messagelist")).to_contain_text("quarantined")
    environment.refresh_from_db()
    assert environment.status == EnvironmentStatus.QUARANTINED
    page.goto(f"/admin/reconciliation/finding/{finding.pk}/change/")
    page.fill("#id_owner", "maria")
    page.fill("#id_note", "inspecting the volume")
    page.click("#lh-acknowledge")
    expect(page.locator(".messagelist")).to_contain_text("owner maria")


def test_the_events_list_and_dashboard_fit_1400_px(page: Page, operator, fleet):
    _, _, _, held, _, _ = fleet
    long_reason = "a very long reason " * 40
    task_update(task=held, actor=SYSTEM, changes={"status": "ready"})
    task_update(task=held, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": long_reason})
    # Unbreakable values (a long branch, a URL) are what ran the details column off the screen.
    event_append(
        type=EventType.ATTEMPT_UPDATED,
        actor=SYSTEM,
        at=clock.now(),
        task=held,
        payload={"branch": "feature/" + "x" * 110, "worktree_path": "/srv/" + "y" * 110, "head_commit": "a" * 40},
    )
    assert Event.objects.count() > 10
    page.set_viewport_size({"width": 1400, "height": 900})
    login(page, "ops")
    for url in ("/admin/ledger/event/", "/admin/", "/admin/ledger/agent/health/", "/admin/jobs/"):
        page.goto(url)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1400, f"{url} is {width} px wide at 1400 px"
    page.goto("/admin/ledger/event/")
    # Nor does the events table scroll (or clip) inside its box: every column is on screen.
    inner = page.evaluate(
        "(() => { const r = document.querySelector('#changelist .results'); return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert inner[0] <= inner[1], f"the events table is {inner[0]} px wide in a {inner[1]} px box"
    screenshot(page, "events-1400.png")
