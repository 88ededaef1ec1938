"""Issue 32's incident flow in Chromium: an agent falls silent holding a lease, the incident check opens one
incident, the dashboard's tile and the incidents page show it, an operator acknowledges and snoozes it in the
browser, and the check resolves it when the agent is heard from again."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from insight.jobs import check_incidents_job
from insight.models import Incident, IncidentRule, IncidentStatus
from leases.services import lease_claim
from ledger.models import Event, EventType
from ledger.services import agent_heartbeat
from tests.console.browser.conftest import login, screenshot
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)

SILENCE = 600
INCIDENTS = "/admin/insight/incident/"


def run_action(page: Page, *, incident: Incident, action: str) -> None:
    page.check(f'input[name="_selected_action"][value="{incident.pk}"]')
    page.select_option('select[name="action"]', action)
    page.click('button[name="index"]')


def test_an_incident_opens_shows_on_the_dashboard_is_acknowledged_and_snoozed_and_resolves(
    page, ledger_admin, clock, settings
):
    settings.LEASEHOLD_AGENT_SILENCE_SECONDS = SILENCE
    project = ProjectFactory(slug="web", name="Web app")
    agent = AgentFactory(handle="worker-1", projects=[project])
    agent_heartbeat(agent=agent)
    lease_claim(task=TaskFactory(project=project, title="Fix the search copy"), agent=agent, lease_seconds=3600)
    assert check_incidents_job().as_dict()["opened"] == 0
    clock.advance(SILENCE + 60)
    assert check_incidents_job().as_dict()["opened"] == 1
    incident = Incident.objects.get()
    assert (incident.rule, incident.subject) == (IncidentRule.AGENT_SILENT, "agent:worker-1")

    login(page, "ops")
    page.goto("/admin/")
    tile = page.locator("#lh-tile-incidents")
    expect(tile.locator(".lh-stat-value")).to_have_text("1")
    expect(tile).to_have_class("lh-stat lh-stat-alert")  # nobody has acknowledged it
    tile.click()
    expect(page).to_have_url(f"{page.url.split('/admin/')[0]}{INCIDENTS}?status__exact=open")
    row = page.locator("#result_list tbody tr").filter(has_text="agent:worker-1")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("worker-1 is silent")
    screenshot(page, "incident-open.png")

    run_action(page, incident=incident, action="acknowledge")
    expect(page.locator(".messagelist")).to_contain_text("Acknowledged: 1 incident.")
    expect(row).to_contain_text("ops")  # acknowledged by
    incident.refresh_from_db()
    assert incident.acknowledged_by == ledger_admin
    page.goto("/admin/")
    expect(tile.locator(".lh-stat-value")).to_have_text("1")
    expect(tile).to_have_class("lh-stat lh-stat-warn")  # open, but somebody is on it

    page.goto(INCIDENTS)
    run_action(page, incident=incident, action="snooze_hour")
    expect(page.locator(".messagelist")).to_contain_text("Snoozed for 1 hour: 1 incident.")
    expect(row).to_contain_text("snoozed")
    page.goto("/admin/")
    expect(tile.locator(".lh-stat-value")).to_have_text("0")  # a snooze hides it from the dashboard

    # The agent is heard from again: the next check resolves the incident, with one notification each way.
    agent_heartbeat(agent=agent)
    assert check_incidents_job().as_dict()["resolved"] == 1
    page.goto(INCIDENTS)
    expect(page.locator("#result_list")).to_have_count(0)  # no open incident: the list is empty
    page.goto(f"{INCIDENTS}?status__exact=resolved")
    resolved = page.locator("#result_list tbody tr").filter(has_text="agent:worker-1")
    expect(resolved).to_contain_text("Resolved")
    assert Incident.objects.get().status == IncidentStatus.RESOLVED
    assert Event.objects.filter(type=EventType.INCIDENT_OPENED).count() == 1
    assert Event.objects.filter(type=EventType.INCIDENT_RESOLVED).count() == 1
    # The agent's timeline, as the agent health page links it.
    page.goto("/admin/ledger/agent/health/")
    page.locator("#agent-worker-1").get_by_role("link", name="incidents").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list")).to_contain_text("Resolved")
