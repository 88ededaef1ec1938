"""A waiting claim-next under the parking worker (core/parking.py), run in-process with the worker's
environ keys: its first try, which parks, and its last try, which the worker runs at the deadline, read the
Idempotency-Key's stored answer only in authentication's statement (issue 34: an idle runner's parked
claim), and the last try still answers a key that another request answered meanwhile."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.parking import CARRY_KEY, DEADLINE_KEY, PARK_KEY
from leases.models import IdempotencyRecord
from push.waiting import event_watcher
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _watcher_stopped_at_the_end():
    """Its LISTEN connection would keep PostgreSQL from dropping the test database."""
    yield
    event_watcher().stop()


def _record_reads(queries: CaptureQueriesContext) -> int:
    return sum("idempotencyrecord" in (query["sql"] or "").lower() for query in queries.captured_queries)


def _claim(agent: Any, key: str, project: Any, **environ: Any) -> tuple[Any, int]:
    """The waiting claim-next with the worker's environ keys: its response, and its statements on the record."""
    with CaptureQueriesContext(connection) as queries:
        response = client_for(agent).post(
            "/api/v1/claims/next/",
            {"project": project.slug, "wait": 60},
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
            **environ,
        )
    return response, _record_reads(queries)


def _park(agent: Any, project: Any, key: str) -> tuple[dict[str, Any], int]:
    parked: dict[str, Any] = {}
    response, reads = _claim(agent, key, project, **{PARK_KEY: lambda **offered: parked.update(offered)})
    assert response.status_code == 204  # the placeholder the worker never sends
    assert parked["deadline"] > time.monotonic()
    return parked, reads


def _last_try(agent: Any, project: Any, key: str, parked: dict[str, Any]) -> tuple[Any, int]:
    """What the worker does at the deadline: the same request again, with its deadline and its ticket."""
    return _claim(agent, key, project, **{DEADLINE_KEY: time.monotonic() - 0.001, CARRY_KEY: parked["carry"]})


def test_the_parked_claims_first_and_last_try_read_the_key_only_with_the_agent():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    parked, first_reads = _park(agent, project, "idle-key")
    try:
        response, last_reads = _last_try(agent, project, "idle-key", parked)
    finally:
        parked["release"]()
    assert response.status_code == 204
    assert (first_reads, last_reads) == (1, 1)  # authentication's one statement each
    assert not IdempotencyRecord.objects.filter(agent=agent, key="idle-key").exists()


def test_a_key_answered_while_parked_is_answered_by_the_claims_path_at_the_deadline():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    parked, _ = _park(agent, project, "k-1")
    try:
        other = client_for(agent).post(
            "/api/v1/claims/next/", {"project": project.slug}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
        )
        assert other.status_code == 204  # stored: a claim-next without wait keeps its 204
        response, _ = _last_try(agent, project, "k-1", parked)
    finally:
        parked["release"]()
    assert_error(response, 409, "IDEMPOTENCY_CONFLICT")
