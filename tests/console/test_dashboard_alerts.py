"""Dashboard alerts that name their task and group (bugs 2, 3, 5), job-health tiles, auto-refresh."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from console.audit.alerts import human_duration
from console.fleet.dashboard import build_dashboard
from leases import jobs
from leases.services import attempt_finish, check_queue_wait, lease_claim, task_update
from ledger.actors import SYSTEM
from reconciliation.jobs import reconcile_job
from reconciliation.models import Condition, SubjectType
from tests.factories import AgentFactory, FindingFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(clock):
    web = ProjectFactory(slug="web", name="Web app", queue_wait_max_seconds=60)
    tasks = [TaskFactory(project=web, title=f"Waiting task {n}") for n in range(20)]
    clock.advance(12 * 86400 + 21 * 3600)
    assert check_queue_wait() == 20
    return web, tasks


def test_the_queue_wait_tile_counts_every_alert_not_a_cut_list(ops_client, waiting):
    """Bug 2: 20 alerts showed as 15, the length of the list the panel was cut to."""
    body = ops_client.get("/admin/").content.decode()
    tile = re.search(r'id="lh-tile-queue-wait"><div class="lh-stat-value">(\d+)<', body)
    assert tile is not None
    assert tile.group(1) == "20"


def test_queue_wait_alerts_name_their_task_in_human_time_and_group_by_project(ops_client, waiting):
    """Bug 3: items showed `ready_since` and `waited_seconds 1115299` and no task. Issue 32: one group per
    condition and project ("3127 in 3089 groups" were per task), named by its latest task."""
    _, tasks = waiting
    body = ops_client.get("/admin/").content.decode()
    panel = body[body.index('id="lh-queue-alerts"') :]
    panel = panel[: panel.index("</table>")]
    assert "waited_seconds" not in panel
    assert "ready_since" not in panel
    assert "ready and unclaimed for 12 d 21 h" in panel
    assert panel.count("<tr class=") == 1
    assert "20 in 1 group" in panel
    newest = tasks[-1]
    assert newest.key in panel
    assert "Waiting task" in panel
    assert "all 20 →" in body


def test_one_condition_in_one_project_is_one_group_with_its_count_and_first_and_last_seen(clock):
    web = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[web])
    noisy = TaskFactory(project=web, title="Noisy one")
    quiet = TaskFactory(project=web, title="Quiet one")
    lease_claim(task=noisy, agent=agent, lease_seconds=3600)
    lease_claim(task=quiet, agent=agent, lease_seconds=3600)
    for _ in range(6):  # six contested writes on one task
        task_update(task=noisy, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "x"})
        clock.advance(60)
        task_update(task=noisy, actor=SYSTEM, changes={"status": "ready"})
    task_update(task=quiet, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "y"})
    other = ProjectFactory(slug="api")
    lease_claim(task=(elsewhere := TaskFactory(project=other)), agent=AgentFactory(projects=[other]), lease_seconds=60)
    task_update(task=elsewhere, actor=SYSTEM, changes={"status": "blocked", "blocked_reason": "z"})
    panel = build_dashboard(now=clock.now()).recent_alerts
    by_project = {group.project: group for group in panel.groups}
    assert set(by_project) == {"web", "api"}
    assert by_project["web"].count == 13  # both tasks of web, one group
    assert by_project["web"].first_seen < by_project["web"].last_seen
    assert by_project["web"].task_key == quiet.key  # named by its latest event
    assert f"under {agent.handle}'s live lease" in by_project["web"].detail
    assert "project__id__exact" in by_project["web"].url
    assert by_project["api"].count == 1


def test_findings_panel_names_the_task_of_an_attempt_finding(ops_client, clock):
    """Bug 3: finding items showed "attempt #43" / "subject 40"."""
    web = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[web])
    task = TaskFactory(project=web, title="Stuck somewhere")
    grant = lease_claim(task=task, agent=agent)
    FindingFactory(
        condition=Condition.STALLED_ATTEMPT,
        project=web,
        subject_type=SubjectType.ATTEMPT,
        subject_key=str(grant.attempt.pk),
        attempt=grant.attempt,
    )
    body = ops_client.get("/admin/").content.decode()
    panel = body[body.index('id="lh-findings"') :]
    panel = panel[: panel.index("</table>")]
    assert task.key in panel
    assert "Stuck somewhere" in panel
    assert "Renewed, but not working" in panel


def _finish_one(project, agent, clock):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    attempt_finish(proof=proof_of(grant), outcome="done")
    return grant.attempt


def test_the_orphan_rate_is_pooled_and_empty_days_are_not_drawn(clock):
    """Bug 5: the headline was the mean of daily ratios with empty days as 0 %, and empty days drawn as 0 %."""
    web = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[web])
    # Day 1: 1 of 1 finished is an orphan (100 %). Day 2: 1 of 9 (11 %). Pooled: 2 / 10 = 20 %.
    _finish_one(web, agent, clock)
    FindingFactory(project=web)  # an orphan branch
    clock.advance(86400)
    for _ in range(9):
        _finish_one(web, agent, clock)
    FindingFactory(project=web)
    dashboard = build_dashboard(now=clock.now())
    assert dashboard.orphan_rate == pytest.approx(0.2)
    svg = str(dashboard.charts[2].svg)
    assert svg.count("<circle") == 2  # 28 empty days are not points at 0 %
    assert "20% pooled over 30 days" in svg
    assert "28 days without finished attempts not drawn" in svg


def test_job_health_tiles_go_red_when_the_sweep_is_stale(ops_client, manager_client, clock):
    jobs.sweep_expired_job()
    reconcile_job()
    body = ops_client.get("/admin/").content.decode()
    assert 'id="lh-tile-scheduler"' in body
    assert re.search(r'class="lh-stat" href="[^"]*#job-sweep_expired" id="lh-tile-sweep_expired"', body)
    clock.advance(4 * 60)
    body = manager_client.get("/admin/").content.decode()  # Managers see it too, not only superusers
    assert re.search(r'class="lh-stat lh-stat-alert" href="[^"]*" id="lh-tile-scheduler"', body)
    assert re.search(r'class="lh-stat lh-stat-alert" href="[^"]*#job-sweep_expired" id="lh-tile-sweep_expired"', body)
    assert "stale (&gt; 3 min 00 s)" in body
    assert not re.search(r'lh-stat-alert" href="[^"]*#job-reconcile"', body)


def test_the_job_health_page_shows_a_failed_job_and_its_error(manager_client, clock, monkeypatch):
    def broken() -> None:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(jobs, "check_queue_wait", broken)
    with pytest.raises(RuntimeError):
        jobs.check_queue_wait_job()
    body = manager_client.get("/admin/jobs/").content.decode()
    assert "RuntimeError: database on fire" in body
    assert 'id="job-check_queue_wait"' in body


def test_auto_refresh_is_a_meta_refresh_toggled_by_a_query_parameter(ops_client):
    assert 'http-equiv="refresh"' not in ops_client.get("/admin/").content.decode()
    body = ops_client.get("/admin/?refresh=30").content.decode()
    assert '<meta http-equiv="refresh" content="30">' in body
    assert "stop auto-refresh" in body


def test_human_durations():
    assert human_duration(1115299) == "12 d 21 h"
    assert human_duration(250) == "4 min 10 s"
    assert human_duration(timedelta(hours=5, minutes=7).total_seconds()) == "5 h 07 min"
    assert human_duration(42) == "42 s"


def test_the_alert_panels_read_under_their_plan_and_leave_no_setting_behind(clock, waiting, monkeypatch):
    """PostgreSQL: the panels' aggregates run with plain index scans and parallel workers off (PANEL_PLAN: a
    bitmap of the type's or severity's index, not the created_at walk over a day of every event), and the
    settings end with the panels."""
    from django.db import connection

    from console.audit import alerts

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner settings")
    seen = []
    grouped = alerts.event_groups

    def spy(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('enable_indexscan'), current_setting('max_parallel_workers_per_gather')"
            )
            seen.append(cursor.fetchone())
        return grouped(*args, **kwargs)

    monkeypatch.setattr("console.fleet.dashboard.event_groups", spy)
    dashboard = build_dashboard(now=clock.now())
    assert dashboard.queue_alerts.total_items == 20
    assert seen == [("off", "0"), ("off", "0")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_indexscan'), current_setting('max_parallel_workers_per_gather')")
        assert cursor.fetchone() != ("off", "0")
