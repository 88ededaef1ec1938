"""The dashboard: tasks by effective status, expiring leases, findings, alerts and charts, in bounded queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.fleet.dashboard import build_dashboard
from leases.services import check_queue_wait, lease_claim, task_update
from ledger.actors import SYSTEM
from ledger.models import EventType
from reconciliation.services import reconcile
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

# Whatever the history: each part is one or two GROUP BYs or index probes (issue 15 added job health,
# the grouped panels' counts and the claimable count; SPEC §19 the spend panel: per day, top agents, top tasks;
# issue 32 the open-incidents tile: one aggregate; issue 33 the status table from the trigger-kept counts,
# so the quarantined tile is its own count of blocked tasks).
DASHBOARD_QUERY_BUDGET = 32


@pytest.fixture
def fleet_state(clock):
    web = ProjectFactory(slug="web", name="Web app", queue_wait_max_seconds=600)
    api = ProjectFactory(slug="api", name="API")
    agent = AgentFactory(handle="agent-07", projects=[web, api])
    short = TaskFactory(project=web, title="Short lease")
    long = TaskFactory(project=web, title="Long lease")
    TaskFactory(project=web, title="Waiting")
    TaskFactory(project=web, title="Not ready", status="open")
    done = TaskFactory(project=api, title="Done already")
    task_update(task=done, actor=SYSTEM, changes={"status": "done"})
    lapsing = TaskFactory(project=api, title="About to lapse")
    lease_claim(task=lapsing, agent=agent, lease_seconds=60)
    clock.advance(700)  # the lapsing lease is gone; "Waiting" has waited past 600 s
    lease_claim(task=short, agent=agent, lease_seconds=300)
    lease_claim(task=long, agent=agent, lease_seconds=3600)
    check_queue_wait()
    reconcile()
    task_update(task=long, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "contested on purpose"})
    return web, api, short, long


def test_tasks_by_effective_status_per_project(clock, fleet_state):
    dashboard = build_dashboard(now=clock.now())
    table = {row.project.slug: {cell.status: cell.count for cell in row.cells} for row in dashboard.projects}
    assert table["web"]["in_progress"] == 2
    assert table["web"]["ready"] == 1
    assert table["web"]["open"] == 1
    assert table["api"]["done"] == 1
    assert table["api"]["ready"] == 1  # its lease lapsed: ready again without anyone acting
    assert table["api"]["in_progress"] == 0
    assert dashboard.live_leases == 2


def test_only_leases_lapsing_within_ten_minutes_are_listed(clock, fleet_state):
    _, _, short, _ = fleet_state
    dashboard = build_dashboard(now=clock.now())
    assert [lease.attempt.task_id for lease in dashboard.expiring] == [short.pk]


def test_findings_alerts_and_charts(clock, fleet_state):
    dashboard = build_dashboard(now=clock.now())
    assert {row.condition: row.open for row in dashboard.findings} == {"expired_lease_still_active": 1}
    assert [group.code for group in dashboard.queue_alerts.groups] == [EventType.TASK_QUEUE_WAIT_EXCEEDED]
    assert EventType.TASK_CONTESTED in [group.code for group in dashboard.recent_alerts.groups]
    assert [chart.title for chart in dashboard.charts] == [
        "Claims per day",
        "Lease conflicts per day",
        "Orphan rate per day",
    ]
    assert "2026-01-05: 3 claims" in dashboard.charts[0].svg
    assert "2026-01-05: 1 conflicts" in dashboard.charts[1].svg


def test_the_charts_are_live_a_claim_shows_at_once(clock, fleet_state):
    """No chart cache: the next load counts a claim made a second ago (the tally is written with the claim)."""
    assert "2026-01-05: 3 claims" in build_dashboard(now=clock.now()).charts[0].svg
    project = ProjectFactory()
    lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]))
    clock.advance(1)
    assert "2026-01-05: 4 claims" in build_dashboard(now=clock.now()).charts[0].svg


def test_the_page_renders_every_part_in_bounded_queries(ops_client, fleet_state):
    with CaptureQueriesContext(connection) as captured:
        body = ops_client.get("/admin/").content.decode()
    assert len(captured.captured_queries) <= DASHBOARD_QUERY_BUDGET
    assert body.count('<svg class="lh-chart"') == 3
    for text in (
        "Web app",
        "Short lease",
        "Expired lease still active",
        "Queue wait exceeded",
        "Changed under a live lease",
    ):
        assert text in body
    assert "Everything else" in body  # the standard app list stays below


def test_an_empty_fleet_gets_helpful_empty_states(ops_client):
    body = ops_client.get("/admin/").content.decode()
    assert "No projects yet" in body
    assert "No lease expires in the next 10 minutes." in body
    assert "No open findings" in body
    assert body.count('<svg class="lh-chart"') == 3


def test_the_status_table_equals_grouping_by_the_effective_status_annotation(clock, fleet_state):
    """The dashboard counts without a lease subquery per task; the annotation is the rule (SPEC §1.3)."""
    from collections import Counter

    from leases.selectors import with_lease_state
    from ledger.models import Task

    web, *_ = fleet_state
    done = TaskFactory(project=web, title="Done but contested")
    agent = AgentFactory(handle="agent-99", projects=[web])
    lease_claim(task=done, agent=agent)
    task_update(task=done, actor=SYSTEM, changes={"status": "cancelled"})  # a live lease on a cancelled task
    dashboard = build_dashboard(now=clock.now())
    shown = {
        (row.project.pk, cell.status): cell.count for row in dashboard.projects for cell in row.cells if cell.count
    }
    rule = Counter(
        (task.project_id, task.effective_status) for task in with_lease_state(Task.objects.all(), now=clock.now())
    )
    assert shown == dict(rule)


def test_a_task_held_by_a_reviewer_counts_as_in_review_not_in_progress(clock):
    from leases.services import attempt_finish
    from leases.services.review_claims import review_claim_next
    from tests.leases.helpers import proof_of

    project = ProjectFactory(slug="rev")
    worker, reviewer = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    work = lease_claim(task=TaskFactory(project=project), agent=worker)
    attempt_finish(proof=proof_of(work), outcome="review")
    lease_claim(task=TaskFactory(project=project), agent=worker)  # one task in progress beside it
    assert review_claim_next(project=project, agent=reviewer) is not None

    dashboard = build_dashboard(now=clock.now())
    totals = {cell.status: cell.count for cell in dashboard.status_totals}
    assert totals["in_review"] == 1
    assert totals["in_progress"] == 1
    assert totals["review"] == 0
    assert dashboard.live_leases == 2


def test_the_ready_tile_counts_to_a_bound_and_says_so(ops_client, monkeypatch):
    """Issue 33: the claimable count stops at CLAIMABLE_COUNTED instead of reading every ready task."""
    from console.fleet import dashboard as dashboard_module

    monkeypatch.setattr(dashboard_module, "CLAIMABLE_COUNTED", 2)
    project = ProjectFactory(slug="bound")
    for number in range(3):
        TaskFactory(project=project, title=f"Ready {number}", status="ready")
    body = ops_client.get("/admin/").content.decode()
    assert "2+" in body
    assert "(counted to 2)" in body
    monkeypatch.setattr(dashboard_module, "CLAIMABLE_COUNTED", 5)
    body = ops_client.get("/admin/").content.decode()
    assert "(counted to" not in body
