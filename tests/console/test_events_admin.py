"""The audit log's admin on a large table: no COUNT(*), a bounded number of queries, CSV that respects filters."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.base import EstimatedCountPaginator
from ledger.models import Event, EventType, Severity
from tests.conftest import START
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/ledger/event/"
QUERY_BUDGET = 14  # session, user, permissions, filter choices, date range, the page: whatever the table size
COUNT_ON_EVENTS = re.compile(r"COUNT\(.*\bFROM\s+\"?ledger_event\"?", re.IGNORECASE | re.DOTALL)


def bulk_events(count: int, *, project, agent) -> None:
    types = (EventType.ATTEMPT_CLAIMED, EventType.NOTE_ADDED, EventType.ATTEMPT_FINISHED, EventType.TASK_CONTESTED)
    Event.objects.bulk_create(
        (
            Event(
                type=types[n % len(types)],
                severity=Severity.WARN if n % len(types) == 3 else Severity.INFO,
                project=project,
                actor_agent=agent,
                payload={"n": n},
                created_at=START - timedelta(minutes=n * 7),
            )
            for n in range(count)
        ),
        batch_size=1000,
    )


def queries_for(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        assert response.status_code == 200, url
        response.content  # noqa: B018 - render the whole page inside the capture
    return [query["sql"] for query in captured.captured_queries]


@pytest.fixture
def big_log(clock):
    project = ProjectFactory(slug="web")
    agent = AgentFactory(handle="agent-07", projects=[project])
    bulk_events(5000, project=project, agent=agent)
    return project, agent


LIST_QUERIES = (
    "",
    "?p=7",
    "?type=task.contested",
    "?severity__exact=warn&p=2",
    "?actor=system",
    "?created_at__year=2026",
    "?created_at__year=2025&created_at__month=12",
    "?created_at__year=2025&created_at__month=12&created_at__day=31",
    "?q=WEB-1",
    "?o=-2",
)


@pytest.mark.parametrize("role", ["ops_client", "manager_client"])
def test_event_list_never_counts_the_table_and_stays_within_budget(request, role, big_log):
    client = request.getfixturevalue(role)
    assert Event.objects.count() > 5000
    for query in LIST_QUERIES:
        sqls = queries_for(client, CHANGELIST + query)
        counting = [sql for sql in sqls if COUNT_ON_EVENTS.search(sql)]
        assert counting == [], (query, counting)
        assert not [sql for sql in sqls if "DISTINCT" in sql.upper() and "ledger_event" in sql], query
        assert len(sqls) <= QUERY_BUDGET, (query, "\n".join(sqls))


def test_event_list_query_count_does_not_grow_with_the_table(ops_client):
    project = ProjectFactory(slug="web")
    agent = AgentFactory(handle="agent-07", projects=[project])
    bulk_events(150, project=project, agent=agent)
    small = len(queries_for(ops_client, CHANGELIST))
    bulk_events(5000, project=project, agent=agent)
    assert len(queries_for(ops_client, CHANGELIST)) == small


def test_the_paginator_reports_a_lower_bound_from_one_bounded_peek(big_log):
    events = Event.objects.order_by("-id")
    first = EstimatedCountPaginator(events, 100, page_number=1)
    with CaptureQueriesContext(connection) as captured:
        assert first.count == 501
    assert first.is_estimate
    assert len(captured.captured_queries) == 1
    assert "LIMIT 501" in captured.captured_queries[0]["sql"]
    total = Event.objects.count()
    last_page = (total - 1) // 100 + 1
    near_end = EstimatedCountPaginator(events, 100, page_number=last_page)
    assert near_end.count == total
    assert not near_end.is_estimate
    assert len(near_end.page(last_page).object_list) == total - (last_page - 1) * 100


def test_the_page_says_at_least_instead_of_a_total(ops_client, big_log):
    body = ops_client.get(CHANGELIST).content.decode()
    assert "More than 500 events" in body
    assert "the audit log is not counted in full" in body


def test_date_hierarchy_links_cover_the_range_without_scanning(ops_client, big_log):
    body = ops_client.get(CHANGELIST).content.decode()
    assert "created_at__year=2025" in body
    assert "created_at__year=2026" in body
    body = ops_client.get(CHANGELIST + "?created_at__year=2026&created_at__month=1").content.decode()
    assert "created_at__day=5" in body
    assert "created_at__day=6" not in body  # nothing after START


def test_csv_export_streams_exactly_the_filtered_rows(manager_client, big_log):
    response = manager_client.get(reverse("admin:ledger_event_export") + "?type=task.contested&severity__exact=warn")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == Event.objects.filter(type=EventType.TASK_CONTESTED).count() == 1250
    assert {(row["type"], row["severity"], row["actor"], row["project"]) for row in rows} == {
        (EventType.TASK_CONTESTED, "warn", "agent-07", "web")
    }
    ids = [int(row["id"]) for row in rows]
    assert ids == sorted(ids, reverse=True)  # the list's own ordering


@pytest.mark.undeclared_event_types  # a row written by hand (direct SQL), as an attacker with database access could
def test_csv_cells_that_look_like_formulas_are_defused(manager_client):
    project = ProjectFactory(slug="web")
    Event.objects.create(type="=HYPERLINK(1)", project=project, payload={}, created_at=START)
    response = manager_client.get(reverse("admin:ledger_event_export"))
    body = b"".join(response.streaming_content).decode()
    assert "'=HYPERLINK(1)" in body


def test_export_selected_action_is_open_to_managers(manager_client, big_log):
    ids = list(Event.objects.order_by("-id").values_list("pk", flat=True)[:3])
    response = manager_client.post(CHANGELIST, {"action": "export_selected", "_selected_action": ids, "index": 0})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert sorted(int(row["id"]) for row in rows) == sorted(ids)


def test_someone_without_view_permission_cannot_export(client, django_user_model):
    user = django_user_model.objects.create_user(username="nobody", password="pw", is_staff=True)
    client.force_login(user)
    response = client.get(reverse("admin:ledger_event_export"))
    assert response.status_code == 403
