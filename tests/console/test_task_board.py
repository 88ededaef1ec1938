"""A project's task board for managers (issue 32): columns by effective status, bounded, refreshing, escaped."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.services import lease_claim
from leases.services.quarantine import quarantine_reason
from ledger.models import Event, EventType, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

BOARD = "/admin/ledger/task/board/"


def column(body: str, status: str) -> str:
    start = body.index(f'id="lh-column-{status}"')
    return body[start : body.index("</section>", start)]


@pytest.fixture
def web():
    project = ProjectFactory(slug="web", name="Web app")
    agent = AgentFactory(handle="agent-07", projects=[project])
    held = TaskFactory(project=project, title="Held <work>")
    lease_claim(task=held, agent=agent)
    TaskFactory(project=project, title="Waiting work")
    for status, title in (("delivered", "In the landing queue"), ("done", "Finished"), ("open", "Not yet")):
        task = TaskFactory(project=project, title=title)
        Task.objects.filter(pk=task.pk).update(status=status)
    stuck = TaskFactory(project=project, title="Keeps failing")
    reason = quarantine_reason(attempts=3, last_id=1, last_status="failed", failure_reason_code="other")
    Task.objects.filter(pk=stuck.pk).update(status="blocked", blocked_reason=reason)
    TaskFactory(project=ProjectFactory(slug="api"), title="Another project's")
    return project


def test_every_effective_status_has_its_column_with_its_tasks(manager_client, web):
    body = manager_client.get(f"{BOARD}web/").content.decode()
    for status in ("open", "ready", "in_progress", "blocked", "review", "in_review", "delivered", "landing", "done"):
        assert f'id="lh-column-{status}"' in body
    assert "Held &lt;work&gt;" in column(body, "in_progress")
    assert "agent-07" in column(body, "in_progress")
    assert "Waiting work" in column(body, "ready")
    assert "In the landing queue" in column(body, "delivered")
    assert "Finished" in column(body, "done")
    assert "Keeps failing" in column(body, "blocked")
    assert "Quarantined" in column(body, "blocked")
    assert "Another project's" not in body
    assert "Ready (blocked)" not in column(body, "ready")
    assert "Held <work>" not in body


def test_a_ready_task_waiting_for_another_says_so(manager_client, web):
    from ledger.actors import SYSTEM
    from ledger.services import dependency_add

    waiting = Task.objects.get(title="Waiting work")
    dependency_add(task=waiting, blocked_by=Task.objects.get(title="Not yet"), actor=SYSTEM)
    assert "Ready (blocked)" in column(manager_client.get(f"{BOARD}web/").content.decode(), "ready")


def test_the_board_follows_the_changes_stream_and_reloads_without_script_unless_stopped(manager_client, web):
    last = Event.objects.order_by("-id").values_list("id", flat=True).first()
    body = manager_client.get(f"{BOARD}web/").content.decode()
    # Without JavaScript: the meta refresh, inside <noscript> so that a browser with script does not reload.
    assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in body
    start = body.index('<script id="lh-board-live-config" type="application/json">')
    config = json.loads(body[body.index(">", start) + 1 : body.index("</script>", start)])
    # The stream of this project, from the last event before the board was read (no replay of history).
    assert config["stream_url"] == f"/api/v1/changes/stream/?project=web&since={last}"
    assert EventType.ATTEMPT_CLAIMED in config["event_types"]
    assert "new EventSource(config.stream_url)" in body
    stopped = manager_client.get(f"{BOARD}web/?refresh=off").content.decode()
    assert 'http-equiv="refresh"' not in stopped
    assert "EventSource" not in stopped


def test_a_column_shows_its_first_cards_and_links_the_rest(manager_client, web, monkeypatch):
    monkeypatch.setattr("console.tasks.board.CARDS_SHOWN", 2)
    for number in range(4):
        TaskFactory(project=web, title=f"Ready {number}")
    body = manager_client.get(f"{BOARD}web/").content.decode()
    ready = column(body, "ready")
    assert ready.count('class="lh-board-card"') == 2
    assert "and 3 more" in ready
    assert "effective_status=ready" in ready


def test_the_board_costs_the_same_queries_at_any_size(manager_client, web):
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert manager_client.get(f"{BOARD}web/").status_code == 200
        return len(captured.captured_queries)

    few = count()
    agent = AgentFactory(projects=[web])
    for number in range(30):
        task = TaskFactory(project=web, title=f"More {number}")
        if number % 3 == 0:
            lease_claim(task=task, agent=agent)
    assert count() == few


def test_unknown_project_and_the_index(manager_client, web):
    assert manager_client.get(f"{BOARD}nope/").status_code == 404
    response = manager_client.get(BOARD)
    assert response.status_code == 302
    assert response["Location"].endswith(f"{BOARD}api/")


def test_the_task_page_and_list_link_the_board(ops_client, web):
    task = Task.objects.get(title="Waiting work")
    assert f'href="{BOARD}web/"' in ops_client.get(f"/admin/ledger/task/{task.pk}/change/").content.decode()
    assert f'href="{BOARD}"' in ops_client.get("/admin/ledger/task/").content.decode()


def test_a_user_without_task_view_permission_gets_403(client, django_user_model, web):
    user = django_user_model.objects.create_user(username="plain", password="x", is_staff=True)
    client.force_login(user)
    assert client.get(f"{BOARD}web/").status_code == 403


def test_the_columns_equal_grouping_by_the_effective_status_annotation(web):
    """The board counts stored statuses moved by the live leases, and reads cards by stored status
    (issue 32: a lease subquery per task made the board grow with the project); the same numbers and
    cards as `with_lease_state`, for work, review and landing leases, a lapsed lease and a held done task."""
    from datetime import timedelta

    from console.tasks.board import board_columns
    from leases.models import Attempt
    from leases.selectors import with_lease_state
    from ledger import clock

    agent = AgentFactory(projects=[web])
    held = []
    for number in range(5):
        task = TaskFactory(project=web, title=f"Held {number}", priority=number)
        lease_claim(task=task, agent=agent)
        held.append(task)
    Attempt.objects.filter(task=held[0]).update(kind="review")
    Attempt.objects.filter(task=held[1]).update(kind="land")
    Task.objects.filter(pk=held[1].pk).update(status="delivered")
    Attempt.objects.filter(task=held[2]).update(lease_expires_at=clock.now() - timedelta(seconds=1))  # lapsed
    Task.objects.filter(pk=held[3].pk).update(status="done")  # still held: in progress, not done
    for number in range(4):
        TaskFactory(project=web, title=f"Ready {number}", priority=10 - number)

    reference = with_lease_state(Task.objects.filter(project=web), now=clock.now())
    expected = {}
    for task in reference:
        expected.setdefault(task.effective_status, []).append(task)
    columns = {column.status: column for column in board_columns(web)}

    assert {status: column.count for status, column in columns.items() if column.count} == {
        status: len(tasks) for status, tasks in expected.items()
    }
    for status, tasks in expected.items():
        ordered = sorted(tasks, key=lambda task: (-task.priority, task.number))
        assert [card.task.pk for card in columns[status].cards] == [task.pk for task in ordered]
    assert columns["in_review"].count == columns["landing"].count == 1
    assert held[3].pk in [card.task.pk for card in columns["in_progress"].cards]
    assert held[2].pk in [card.task.pk for card in columns["ready"].cards]


def test_the_board_counts_without_reading_the_task_table_and_reads_cards_in_order(manager_client, web):
    """Issue 33: the column counts are the trigger-kept counts; each column's cards are read in the board's
    order along an index (PostgreSQL: `task_project_status`, or `task_list_order` on a tiny table), not sorted
    from all of a status's tasks."""
    with CaptureQueriesContext(connection) as captured:
        assert manager_client.get(f"{BOARD}web/").status_code == 200
    statements = [query["sql"] for query in captured.captured_queries]
    counted = [sql for sql in statements if 'COUNT("ledger_task"."id")' in sql or "COUNT(*)" in sql]
    assert counted == []
    if connection.vendor != "postgresql":
        return
    # The columns of stored statuses (a live column reads its few tasks by id).
    by_status = [sql.rsplit(" WHERE ", 1) for sql in statements if sql.endswith("LIMIT 25")]
    cards = [head + " WHERE " + where for head, where in by_status if 'AND "ledger_task"."id" IN (' not in where]
    assert cards
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a test table is tiny: ask which index serves the order
        for sql in cards:
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "task_project_status" in plan or "task_list_order" in plan  # both are in the board's order
            assert "Sort Key: ledger_task.priority DESC" not in plan
        cursor.execute("RESET enable_seqscan")
