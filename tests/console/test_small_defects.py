"""Issue 32's small defects, each pinned by a test that failed before its fix."""

from __future__ import annotations

import pytest

from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["?holder=%00", "?holder=a%00b", "?q=%00"])
def test_a_nul_in_a_task_filter_is_no_server_error(ops_client, fleet, query):
    response = ops_client.get(f"/admin/ledger/task/{query}")
    assert response.status_code in (200, 302), response.status_code


def test_exporting_events_with_a_garbage_date_filter_is_no_server_error(ops_client, fleet):
    response = ops_client.get("/admin/ledger/event/export/?created_at__gte=garbage")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_projects_are_listed_in_natural_order(ops_client):
    for slug in ("q10", "q2", "q1", "q0", "q11"):
        ProjectFactory(slug=slug, name=slug.upper())
    body = ops_client.get("/admin/ledger/project/").content.decode()
    positions = [body.index(f">{slug.upper()}<") for slug in ("q0", "q1", "q2", "q10", "q11")]
    assert positions == sorted(positions)
