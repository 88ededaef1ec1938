"""`core.prepared`'s statements have their placeholders converted once on PostgreSQL, whatever their length.

psycopg caches a statement's conversion only up to 4,096 bytes and 50 parameters; claim-next's
candidate statement is longer and was split afresh on every claim (`core.postgresql.StatementQuery`).
"""

from __future__ import annotations

import psycopg._queries
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.prepared import run_select
from leases.services import lease_claim_next
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's conversion is PostgreSQL's"),
]


@pytest.fixture
def fresh_conversions(monkeypatch):
    """Every conversion psycopg makes without its cache, by the statement's length."""
    made: list[int] = []
    for name in ("_query2pg_nocache", "_query2pg_client_nocache"):
        convert = getattr(psycopg._queries, name)

        def counting(query, encoding, convert=convert):
            made.append(len(query))
            return convert(query, encoding)

        monkeypatch.setattr(psycopg._queries, name, counting)
    return made


@pytest.mark.parametrize("prepared_statements", [True, False], ids=["server-binding", "client-binding"])
def test_claim_next_converts_its_long_statement_once(monkeypatch, fresh_conversions, prepared_statements):
    monkeypatch.setitem(connection.settings_dict, "PREPARED_STATEMENTS", prepared_statements)
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    for _ in range(3):
        TaskFactory(project=project)
    for _ in range(3):
        assert lease_claim_next(project=project, agent=agent) is not None
    assert lease_claim_next(project=project, agent=agent) is None
    assert fresh_conversions == []


def test_a_prepared_statement_is_still_in_djangos_query_log():
    """psycopg keeps the statement on the cursor only when it sends it unprepared: once the connection had
    prepared it, Django logged None as its SQL (and the read counts of the parked-claim tests saw nothing)."""
    assert connection.settings_dict["PREPARED_STATEMENTS"]
    threshold = connection.settings_dict["OPTIONS"]["prepare_threshold"]
    sql = "SELECT %s::int + 1 AS lh_logged_statement"
    with CaptureQueriesContext(connection) as queries:
        for value in range(threshold + 3):  # past the threshold: prepared, then run by its name
            assert run_select(sql, [value]) == [(value + 1,)]
    assert [query["sql"] for query in queries.captured_queries] == ["SELECT $1::int + 1 AS lh_logged_statement"] * (
        threshold + 3
    )
