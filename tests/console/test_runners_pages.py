"""The Runners pages (SPEC §23.1): the list and a runner's page show each runner's state and slots, in a
number of queries that does not grow with runners or slots; read-only for Managers."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger.actors import SYSTEM
from ledger.models import EventType
from runners.models import SlotState
from runners.services import SlotReport, runner_cordon, runner_drain, runner_heartbeat
from tests.console.runner_fleet import RunnerFleet, build_fleet, make_runner, register

pytestmark = pytest.mark.django_db

LIST = "/admin/runners/runner/"


@pytest.fixture
def runners(clock) -> RunnerFleet:
    return build_fleet()


def detail(runner) -> str:
    return reverse("admin:runners_runner_change", args=[runner.pk])


def row_of(html: str, name: str) -> str:
    start = html.index(f'id="runner-{name}"')
    return html[start : html.index("</tr>", start)]


@pytest.mark.parametrize("role", ["ops_client", "manager_client"])
def test_the_list_shows_each_runner_online_offline_lost_with_its_slots(request, role, runners):
    runner_cordon(runner=runners.busy, actor=SYSTEM)
    runner_drain(runner=runners.fresh, actor=SYSTEM)
    page = request.getfixturevalue(role).get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    busy = row_of(html, "gpu-box")
    assert "lh-runner-online" in busy
    assert "lh-runner-cordoned" in busy
    assert "gpu-box.internal" in busy
    assert "1.4.0" in busy
    assert ">gpu<" in busy
    assert ">linux<" in busy
    assert "web" in busy
    assert "1 · 1" in busy  # one slot working, one idle
    assert "0 s ago" in busy
    lost = row_of(html, "old-box")
    assert "lh-runner-lost" in lost
    assert "lh-runner-cordoned" not in lost
    assert "2 min 00 s ago" in lost
    fresh = row_of(html, "new-box")
    assert "lh-runner-unregistered" in fresh
    assert "lh-runner-draining" in fresh
    assert "never" in fresh
    assert "deletelink" not in html


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        ("online", {"gpu-box"}),
        ("offline", {"old-box", "new-box"}),
        ("lost", {"old-box"}),
        ("cordoned", {"new-box"}),
        ("draining", set()),
    ],
)
def test_the_status_filter(ops_client, runners, status, shown):
    runner_cordon(runner=runners.fresh, actor=SYSTEM)
    html = ops_client.get(LIST, {"status": status}).content.decode()
    assert {name for name in ("gpu-box", "old-box", "new-box") if f'id="runner-{name}"' in html} == shown


def test_a_runner_goes_offline_when_its_heartbeats_stop_before_the_job_marks_it_lost(ops_client, runners, clock):
    clock.advance(46)  # three heartbeats missed; the lost-runner job has not run
    html = ops_client.get(LIST).content.decode()
    assert "lh-runner-offline" in row_of(html, "gpu-box")
    assert 'id="runner-gpu-box"' in ops_client.get(LIST, {"status": "offline"}).content.decode()


def _count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_list_reads_in_the_same_queries_for_3_runners_as_for_11_with_4_slots_each(ops_client, clock):
    build_fleet(slots=4)
    few = _count(ops_client, LIST)
    from ledger.models import Project

    project = Project.objects.get(slug="web")
    for n in range(8):
        more = make_runner(f"more-{n}", project, slots=4, labels=("gpu",))
        register(more)
        runner_heartbeat(runner=more, slots=[SlotReport(number=s, state=SlotState.WORKING) for s in range(1, 5)])
    assert _count(ops_client, LIST) == few
    assert few <= 10, few  # session, user, permissions, the counts, runners, projects, slots, agents


def test_a_runners_page_shows_its_slots_attempt_task_and_events(ops_client, runners):
    html = ops_client.get(detail(runners.busy)).content.decode()
    attempt = runners.attempt
    slot1 = html[html.index('id="slot-1"') : html.index('id="slot-2"')]
    assert reverse("admin:ledger_agent_change", args=[runners.slot(runners.busy, 1).agent_id]) in slot1
    assert "gpu-box.1" in slot1
    assert "Working" in slot1
    assert reverse("admin:leases_attempt_change", args=[attempt.pk]) in slot1
    assert reverse("admin:ledger_task_change", args=[attempt.task_id]) in slot1
    assert attempt.task.key in slot1
    assert "for 0 s" in slot1
    assert 'id="lh-cancel-slot-1"' in slot1
    slot2 = html[html.index('id="slot-2"') :]
    assert "Idle" in slot2[: slot2.index("</tr>")]
    assert 'id="lh-cancel-slot-2"' not in html
    events = html[html.index('id="lh-runner-events"') :]
    registered, created = EventType.RUNNER_REGISTERED.value, EventType.RUNNER_CREATED.value
    assert registered in events
    assert created in events
    assert events.index(registered) < events.index(created)  # newest first
    for button in ("lh-runner-cordon", "lh-runner-drain", "lh-runner-rotate-token"):
        assert f'id="{button}"' in html


def test_a_lost_runners_page_shows_the_lost_event(ops_client, runners):
    html = ops_client.get(detail(runners.lost)).content.decode()
    assert "lh-runner-lost" in html
    assert EventType.RUNNER_LOST.value in html
    assert "missed_heartbeats: 8" in html


def test_a_manager_sees_a_runners_page_without_any_lever(manager_client, runners):
    page = manager_client.get(detail(runners.busy))
    assert page.status_code == 200
    html = page.content.decode()
    assert runners.attempt.task.key in html
    assert "lh-cancel-slot" not in html
    assert "lh-runner-actions" not in html
    assert "need the permission to change runners" in html


def test_a_runners_page_reads_in_the_same_queries_for_2_slots_as_for_8(ops_client, runners):
    small = _count(ops_client, detail(runners.busy))
    big = make_runner("wide-box", runners.project, slots=8)
    register(big)
    from leases.services import lease_claim
    from tests.factories import TaskFactory

    for number in range(1, 9):
        lease_claim(task=TaskFactory(project=runners.project), agent=runners.slot(big, number).agent)
    assert _count(ops_client, detail(big)) == small
    assert small <= 10, small  # session, user, permissions, runner, projects, slots, agents, attempts, events


def test_the_dashboard_links_to_the_runners(ops_client, manager_client, runners):
    for client in (ops_client, manager_client):
        assert 'id="lh-runners-link"' in client.get("/admin/").content.decode()


def test_a_runners_events_are_its_own_read_through_the_type_index(runners):
    """The events of another runner and other types are left out; the ids come from `event_type_time` (SQLite's
    planner scanned the whole event log for them, its statistics counting nine types as half the log)."""
    from runners.selectors import runner_events

    own = list(runner_events(runners.busy))
    assert own
    assert all(event.payload.get("runner") == runners.busy.name for event in own)
    assert [event.pk for event in own] == sorted((event.pk for event in own), reverse=True)
    assert {event.pk for event in own}.isdisjoint(event.pk for event in runner_events(runners.lost))
    assert len(list(runner_events(runners.busy, limit=1))) == 1
    sql, params = runner_events(runners.busy).query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = [row[-1] for row in cursor.fetchall()]
            assert any("event_type_time" in line for line in plan), plan
            assert not any(line.startswith("SCAN") and "ledger_event" in line for line in plan), plan
