"""Search indexed on both databases (SPEC §25, issue 33): the same answers and snippets, the index
used, kept current by writes, and bounded in time (SEARCH_TOO_BROAD)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from core.errors import SearchTooBroad
from leases.search import search, search_answer
from ledger.actors import SYSTEM
from tests.factories import AttemptFactory, NoteFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

LONG = "Padding words before anything interesting happens here. " * 6

FIXTURE_TASKS = [
    ("Flaky login test", "The login test fails on CI when the clock drifts."),
    ("Migration locks the table", LONG + "The flaky migration 0042 locks the events table for minutes."),
    ("Runner slowness", "The runners were running slowly after the upgrade."),
    ("Signup form", "Signup validation rejects plus addresses."),
]
FIXTURE_NOTES = [
    (0, "Found it: the login clock drift comes from the fake clock."),
    (1, "Checkpoint: split the migration; the table lock is gone."),
    (3, "Nothing flaky here, signup works."),
]
# Pinned once and held on both databases: the same hits and the same snippets (SPEC §25).
EXPECTED = {
    '"table lock"': [
        ("note", "Migration locks the table", "Checkpoint: split the migration; the **table lock** is gone.")
    ],
    "flaky": [
        ("note", "Signup form", "Nothing **flaky** here, signup works."),
        ("task", "Flaky login test", "The login test fails on CI when the clock drifts."),
        (
            "task",
            "Migration locks the table",
            "…happens here. Padding words before anything interesting happens here. The **flaky** migration 0042 "
            "locks the events table for minutes.",
        ),
    ],
    "flaky -signup": [
        ("task", "Flaky login test", "The login test fails on CI when the clock drifts."),
        (
            "task",
            "Migration locks the table",
            "…happens here. Padding words before anything interesting happens here. The **flaky** "
            "migration 0042 locks the events table for minutes.",
        ),
    ],
    "login clock": [
        ("note", "Flaky login test", "Found it: the **login clock** drift comes from the fake **clock**."),
        ("task", "Flaky login test", "The **login** test fails on CI when the **clock** drifts."),
    ],
    "migration table": [
        ("note", "Migration locks the table", "Checkpoint: split the **migration**; the **table** lock is gone."),
        (
            "task",
            "Migration locks the table",
            "…here. Padding words before anything interesting happens here. The flaky **migration** "
            "0042 locks the events **table** for minutes.",
        ),
    ],
    "running": [("task", "Runner slowness", "The runners were **running** slowly after the upgrade.")],
    "signup or runner": [
        ("note", "Signup form", "Nothing flaky here, **signup** works."),
        ("task", "Runner slowness", "The **runners** were running slowly after the upgrade."),
        ("task", "Signup form", "**Signup** validation rejects plus addresses."),
    ],
}


@pytest.fixture
def fixture_set(clock):
    project = ProjectFactory(slug="fx")
    tasks = [TaskFactory(project=project, title=title, description=text) for title, text in FIXTURE_TASKS]
    for index, content in FIXTURE_NOTES:
        NoteFactory(attempt__task=tasks[index], content=content)
    return project, tasks


def _answers(project, query):
    hits, _ = search(query=query, agent=None, project=project, limit=50)
    return sorted((hit.kind, hit.title, hit.snippet) for hit in hits)


@pytest.mark.parametrize("query", sorted(EXPECTED))
def test_the_same_answers_and_snippets_on_both_databases(fixture_set, query):
    project, _ = fixture_set
    assert _answers(project, query) == EXPECTED[query]


def test_a_title_match_ranks_above_a_description_match(fixture_set):
    project, _ = fixture_set
    hits, _ = search(query="flaky", agent=None, project=project)
    tasks = [hit.title for hit in hits if hit.kind == "task"]
    assert tasks == ["Flaky login test", "Migration locks the table"]


@pytest.mark.parametrize("query", ["the", "-flaky", "- - -", '""', "or", '-"a b" -c'])
def test_a_query_with_nothing_to_find_finds_nothing(fixture_set, query):
    project, _ = fixture_set
    assert search(query=query, agent=None, project=project) == ([], False)


def test_writes_keep_the_index_current(fixture_set):
    from leases.services.task_updates import task_update

    project, tasks = fixture_set
    assert _answers(project, "quasar") == []
    task = TaskFactory(project=project, title="Quasar renderer", description="Draws quasars.")
    assert [hit[1] for hit in _answers(project, "quasar")] == ["Quasar renderer"]
    task_update(task=task, actor=SYSTEM, changes={"title": "Pulsar renderer", "description": "Draws pulsars."})
    assert _answers(project, "quasar") == []
    assert [hit[1] for hit in _answers(project, "pulsar")] == ["Pulsar renderer"]
    task_update(task=tasks[3], actor=SYSTEM, changes={"priority": 5})  # the text untouched: still found
    assert ("task", "Signup form") in [hit[:2] for hit in _answers(project, "signup")]
    NoteFactory(attempt__task=tasks[2], content="Profiled the nebula loop.")
    assert _answers(project, "nebula") == [("note", "Runner slowness", "Profiled the **nebula** loop.")]


def test_the_search_reads_the_text_index(fixture_set):
    """EXPLAIN shows the GIN index (PostgreSQL) or the FTS5 table (SQLite) serving the match."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a handful of rows: make the planner show its index
            plans = []
            for table in ("ledger_task", "leases_note"):
                cursor.execute(
                    f"EXPLAIN SELECT id FROM {table} WHERE search_vector @@ websearch_to_tsquery('english', 'flaky')"
                )
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
            assert "ledger_task_search" in plans[0]
            assert "leases_note_search" in plans[1]
        else:
            for fts in ("ledger_task_fts", "leases_note_fts"):
                cursor.execute(f"EXPLAIN QUERY PLAN SELECT rowid FROM {fts} WHERE {fts} MATCH 'flaky'")
                assert any("VIRTUAL TABLE INDEX" in row[-1] for row in cursor.fetchall())


def test_a_search_past_its_time_answers_search_too_broad(fixture_set, monkeypatch):
    project, _ = fixture_set
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Noisy build"))
    for number in range(60):
        NoteFactory(attempt=attempt, content=f"flaky build {number} " + "word " * 1500)
    if connection.vendor == "sqlite":
        # The progress handler reads the clock every 1,000 steps: a clock an hour on stops the first look.
        from leases import search as module

        real = module.time.monotonic
        calls = iter(range(10**9))
        monkeypatch.setattr(module.time, "monotonic", lambda: real() + (3600 if next(calls) > 0 else 0))
    with override_settings(LEASEHOLD_SEARCH_TIMEOUT_MS=1), pytest.raises(SearchTooBroad) as refused:
        search(query="flaky word", agent=None, project=project, limit=50)
    monkeypatch.undo()
    assert refused.value.code == "SEARCH_TOO_BROAD"
    # The connection is usable afterwards, and the bound is gone.
    assert [hit.kind for hit in search(query="flaky", agent=None, project=project, limit=1)[0]] == ["task"]


def test_the_api_answers_search_too_broad_as_a_400(fixture_set, monkeypatch):
    from tests.api.conftest import assert_error, client_for
    from tests.factories import AgentFactory

    project, _ = fixture_set
    client = client_for(AgentFactory(projects=[project]))

    def too_broad(**kwargs):
        raise SearchTooBroad(details={"timeout_ms": 2000})

    monkeypatch.setattr("leases.apis.search.search_answer", too_broad)
    error = assert_error(client.get("/api/v1/search/?q=flaky"), 400, "SEARCH_TOO_BROAD")
    assert error["retryable"] is False


def test_the_sweep_flushes_the_search_indexes_pending_entries(clock):
    """PostgreSQL: new vectors wait in GIN's pending list, which every scan of the index reads whole; the
    sweep moves them into the index every minute (`flush_pending_entries`). SQLite has no pending list."""
    from leases.jobs import sweep_expired_job
    from leases.search import flush_pending_entries

    flush_pending_entries()
    project = ProjectFactory(slug="zoo")
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Pending zebra"))
    for n in range(50):
        NoteFactory(attempt=attempt, content=f"a pending zebra sighting {n}")
    report = sweep_expired_job()
    if connection.vendor != "postgresql":
        assert flush_pending_entries() is None
        assert "search_pending_pages_flushed" not in report
        return
    assert report["search_pending_pages_flushed"] > 0
    assert flush_pending_entries() == 0  # nothing new since
    assert [hit.kind for hit in search_answer(query="zebra", agent=None, project=project, limit=100).hits].count(
        "note"
    ) == 50


def test_a_flush_the_database_refuses_never_fails_the_sweep(clock, monkeypatch, caplog):
    """PostgreSQL lets only an index's owner (or a superuser) flush it: a server whose role did not migrate
    gets an error, which is logged, and the sweep goes on (its expiries are its job)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's pending lists")
    from leases import search as module
    from leases.jobs import sweep_expired_job

    monkeypatch.setattr(module, "SEARCH_INDEXES", ("no_such_index",))
    report = sweep_expired_job()
    assert report["search_pending_pages_flushed"] == 0
    assert "not flushed" in caplog.text
    TaskFactory(title="after the refusal")  # the connection and its transaction are still usable
