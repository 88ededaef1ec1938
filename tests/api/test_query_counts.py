"""Query counts of the hot paths, pinned at the lowest reached.

Measured per request, including authentication (1 query) and the
transaction's two markers (BEGIN/COMMIT, or SAVEPOINT/RELEASE inside a test
transaction): the same numbers on SQLite and PostgreSQL, in a test
transaction and with real ones. What is left beyond the views' own reads
(authentication, the task or project lookup, the blocker count after finish)
belongs to the services and the work context: a first claim is 2 view
queries + 2 markers + 5 claim statements (lock, state, epoch, attempt,
event); claim-next locks with its candidate query instead. SPEC §16.2
added two context reads to every claim (the active decisions, the latest
comments); issue 34 folded whether there are any, and any unresolved
blockers, into the claim's state read, so a claim reads them only when there
are some (a re-claim also reads the latest checkpoint and the recent
attempts); and a finish's blocker count into its lock statement.

Issue 34 lowered the pins (claim and claim-next 12 → 9, finish 9 → 8): a
cycle through HTTP is 30 statements on PostgreSQL (was 33), plus no pool
probe for a connection known good (`core.pool_check`; was one per request).

Round two (stop 39) combined the services' writes on PostgreSQL, where each
statement is a round trip (SQLite keeps its statements: in-process, none):
the claim's epoch, attempt and event are one statement (claim 9 → 7); renew
and a note are one statement each, outside any transaction (5 → 2, 7 → 2);
finish's attempt end, task update and two events are one (8 → 5).
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.api.conftest import attempt_url, client_for, holder
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

# Stop 39 (docs/performance.md, "Prepared statements and the request's own statements"): claim-next's
# project is read with the token's agent, in authentication's statement (`api.principal_row`): one less.
# Stop 39 ("Round trips, round two"): on PostgreSQL renew and the note are one statement outside a
# transaction, the claim's epoch, attempt and event one statement, finish's writes combined.
if connection.vendor == "postgresql":
    PINNED = {"claim": 7, "claim_next": 6, "renew": 2, "note": 2, "finish": 5}
else:
    PINNED = {"claim": 9, "claim_next": 8, "renew": 5, "note": 7, "finish": 8}
# Outside a test transaction claim-next first looks for a candidate without a lock
# (`leases.services.claim_next._nothing_to_claim`): one statement more when it finds one, and an empty
# claim-next is authentication (with the project) and that read, with no transaction (SPEC §20: in a
# fleet most claims find nothing). Stop 40: on PostgreSQL too (it was 4 there, with BEGIN, the locking
# read and COMMIT; a claim that finds one 6). Stop 49: that read is a column of authentication's statement
# for a claim-next that neither waits nor names a class nor sends a key (`api.principal_row`): an empty
# claim-next is one statement, and one that finds a candidate no longer reads it twice.
IN_PRODUCTION = {**PINNED, "claim_next": 8 if connection.vendor == "sqlite" else 6, "empty_claim_next": 1}


def _cycle(client, project, limit):
    task = TaskFactory(project=project)
    TaskFactory(project=project)
    with limit("claim"):
        claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    assert claim.status_code == 201
    claim = claim.json()
    with limit("claim_next"):
        assert client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").status_code == 201
    with limit("renew"):
        assert client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)).status_code == 200
    with limit("note"):
        note = {"kind": "checkpoint", "content": "c"}
        assert client.post(attempt_url(claim, "notes"), note, format="json", **holder(claim)).status_code == 201
    with limit("finish"):
        assert (
            client.post(attempt_url(claim, "finish"), {"outcome": "done"}, format="json", **holder(claim)).status_code
            == 200
        )


@pytest.mark.django_db
def test_hot_path_query_counts(client, project, django_assert_max_num_queries):
    client.get("/api/v1/projects/")  # warm up
    _cycle(client, project, lambda name: django_assert_max_num_queries(PINNED[name]))


@pytest.mark.django_db(transaction=True)
def test_hot_path_query_counts_as_in_production(django_assert_max_num_queries, clock):
    project = ProjectFactory(slug="prod")
    client = client_for(AgentFactory(projects=[project]))
    client.get("/api/v1/projects/")
    _cycle(client, project, lambda name: django_assert_max_num_queries(IN_PRODUCTION[name]))
    with django_assert_max_num_queries(IN_PRODUCTION["empty_claim_next"]):
        assert client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").status_code == 204


@pytest.mark.django_db
def test_an_idempotent_claim_costs_three_or_four_queries_more_and_its_replay_two_in_all(
    client, project, django_assert_max_num_queries
):
    client.get("/api/v1/projects/")
    task = TaskFactory(project=project)
    url = f"/api/v1/tasks/{task.key}/claim/"
    # + the record's INSERT (and, on PostgreSQL, its UPDATE), + the service's savepoint inside our transaction
    # and its release. Stop 39: the record's lookup is a LEFT JOIN of authentication's statement
    # (`api.principal_row`), no longer its own (was + 5 and 3 in all). Stop 48: on SQLite the record is
    # inserted once, with its answer, after the work (`leases.idempotency`, step 2; + 4 before).
    with django_assert_max_num_queries(PINNED["claim"] + (3 if connection.vendor == "sqlite" else 4)):
        assert client.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="q").status_code == 201
    with django_assert_max_num_queries(2):  # authentication with the record, the attempt (to re-derive the token)
        assert client.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="q").status_code == 201
