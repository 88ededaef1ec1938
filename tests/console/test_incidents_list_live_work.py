"""The incidents list follows the open incidents, not the kept history (stop 40, issue 33).

Resolved incidents are kept for ever. The list used to count every incident
(the admin's full result count) on every request, the open list included, and
sorted every incident for "All": it now never counts in full (the pager looks
ahead a few pages) and reads the `incident_recent` index newest first.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from insight.models import Incident, IncidentRule, IncidentStatus

pytestmark = pytest.mark.django_db

INCIDENTS = "/admin/insight/incident/"


def _kept(clock, *, resolved: int, open_: int) -> None:
    now = clock.now()
    rows = []
    for index in range(resolved + open_):
        opened = now - timedelta(minutes=7 * index)
        is_open = index < open_
        rows.append(
            Incident(
                rule=IncidentRule.AGENT_SILENT,
                subject=f"agent:a{index}",
                title=f"Incident {index}",
                status=IncidentStatus.OPEN if is_open else IncidentStatus.RESOLVED,
                opened_at=opened,
                last_seen_at=opened,
                resolved_at=None if is_open else opened + timedelta(minutes=5),
            )
        )
    Incident.objects.bulk_create(rows)


def test_the_open_list_shows_the_open_incidents_and_counts_nothing_in_full(ops_client, clock):
    _kept(clock, resolved=300, open_=3)
    with CaptureQueriesContext(connection) as captured:
        body = ops_client.get(INCIDENTS).content.decode()
    assert body.count('class="field-title"') == 3
    assert "3 results" in body
    counts = [query["sql"] for query in captured.captured_queries if "COUNT(" in query["sql"].upper()]
    assert counts == []


def test_every_incident_is_paged_newest_first_and_labelled_as_not_counted(ops_client, clock):
    _kept(clock, resolved=300, open_=3)
    body = ops_client.get(INCIDENTS + "?status__exact=all").content.decode()
    assert body.count('class="field-title"') == 50
    assert "Incident 0<" in body  # the newest
    assert "Incident 49<" in body
    assert "Incident 50<" not in body
    assert "more than 250 results" in body
    last = ops_client.get(INCIDENTS + "?status__exact=all&p=7").content.decode()  # the last page: exact
    assert last.count('class="field-title"') == 3
    assert "303 results" in last
