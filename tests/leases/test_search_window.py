"""Search ranks a window by construction (SPEC §25, issue 33): each kind's RANK_WINDOW newest visible
matches, the same on both databases and on both of PostgreSQL's ways to them (through GIN, or walking
the primary key backwards), and the answer says when it ranked a window."""

from __future__ import annotations

import pytest
from django.db import connection

from leases import search as module
from leases.search import search_answer
from tests.factories import AgentFactory, AttemptFactory, NoteFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

WINDOW = 3
# PostgreSQL's two ways to the window: a probe limit of 0 makes every word "common" (the walk), a large
# one every word "rare" (GIN). SQLite has one way (FTS5 newest first): both values run it.
PATHS = {"walk": 0, "gin": 10**6}


@pytest.fixture
def window(monkeypatch):
    monkeypatch.setattr(module, "RANK_WINDOW", WINDOW)


@pytest.fixture(params=sorted(PATHS))
def path(request, monkeypatch):
    monkeypatch.setattr(module, "GIN_PROBE_LIMIT", PATHS[request.param])
    return request.param


@pytest.fixture
def corpus(clock):
    """Six notes and five tasks with "zebra"; the oldest of each kind matches it best (the word three times)."""
    project = ProjectFactory(slug="zoo")
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Keeper rota"))
    notes = [NoteFactory(attempt=attempt, content="zebra zebra zebra, the oldest and best match")]
    notes += [NoteFactory(attempt=attempt, content=f"a zebra sighting, number {n}") for n in range(5)]
    tasks = [TaskFactory(project=project, title="Zebra zebra zebra", description="The oldest task.")]
    tasks += [TaskFactory(project=project, title=f"Task {n}", description="A zebra crossing.") for n in range(4)]
    return project, tasks, notes, attempt


def _answer(query, **kwargs):
    answer = search_answer(query=query, limit=50, **kwargs)
    return sorted((hit.kind, hit.order) for hit in answer.hits), answer.windowed


def test_a_common_word_ranks_only_the_newest_window_of_each_kind(window, path, corpus):
    project, tasks, notes, _ = corpus
    hits, windowed = _answer("zebra", agent=None, project=project)
    newest = [("note", note.pk) for note in notes[-WINDOW:]] + [("task", task.pk) for task in tasks[-WINDOW:]]
    assert hits == sorted(newest)  # the best-matching oldest ones are outside the window
    assert windowed is True


def test_the_window_is_ranked_and_the_same_on_both_ways(window, corpus, monkeypatch):
    project, _, _, _ = corpus
    answers = {}
    for name, limit in PATHS.items():
        monkeypatch.setattr(module, "GIN_PROBE_LIMIT", limit)
        answer = search_answer(query="zebra", agent=None, project=project, limit=50)
        answers[name] = [(hit.kind, hit.order, round(hit.rank, 6), hit.snippet) for hit in answer.hits]
    assert answers["walk"] == answers["gin"]
    ranks = [rank for _, _, rank, _ in answers["gin"]]
    assert len(ranks) == 2 * WINDOW
    assert ranks == sorted(ranks, reverse=True)
    assert all("**zebra**" in snippet for kind, _, _, snippet in answers["gin"] if kind == "note")


def test_a_word_within_the_window_ranks_every_match(window, path, corpus):
    project, _, _, attempt = corpus
    once = NoteFactory(attempt=attempt, content="an okapi, once")
    assert _answer("okapi", agent=None, project=project) == ([("note", once.pk)], False)
    # Exactly the window's size is every match: not windowed.
    for n in range(WINDOW - 1):
        NoteFactory(attempt=attempt, content=f"okapi {n}")
    hits, windowed = _answer("okapi", agent=None, project=project)
    assert (len(hits), windowed) == (WINDOW, False)


def test_the_window_is_the_newest_matches_the_agent_may_see(window, path, corpus):
    """Newer matches in a project the agent is not in neither show nor push its own out of the window."""
    project, tasks, notes, _ = corpus
    agent = AgentFactory(projects=[project])
    hidden = ProjectFactory(slug="hidden")
    other = AttemptFactory(task=TaskFactory(project=hidden, title="Zebra secrets", description="zebra"))
    for n in range(WINDOW + 2):
        NoteFactory(attempt=other, content=f"a hidden zebra {n}")
        TaskFactory(project=hidden, title=f"Hidden zebra {n}")
    hits, windowed = _answer("zebra", agent=agent)
    newest = [("note", note.pk) for note in notes[-WINDOW:]] + [("task", task.pk) for task in tasks[-WINDOW:]]
    assert (hits, windowed) == (sorted(newest), True)
    # A project of its own, only: the same window; another's project: NOT_FOUND at the API (tested there).
    assert _answer("zebra", agent=agent, project=project) == (sorted(newest), True)


def test_the_api_says_when_it_ranked_a_window(window, corpus):
    from tests.api.conftest import client_for

    project, _, _, _ = corpus
    client = client_for(AgentFactory(projects=[project]))
    body = client.get("/api/v1/search/?q=zebra").json()
    assert (len(body["results"]), body["windowed"]) == (2 * WINDOW, True)
    body = client.get("/api/v1/search/?q=oldest").json()
    assert (len(body["results"]), body["windowed"]) == (2, False)


def test_each_way_reads_the_index_it_claims(corpus):
    """PostgreSQL: the walk is a backward primary-key scan that stops; the GIN way reads the text index."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's two ways; SQLite has one (FTS5 newest first)")
    from django.db import transaction
    from django.db.models import BooleanField, F
    from django.db.models.expressions import RawSQL

    from leases.models import Note

    matches = RawSQL("leases_note.search_vector @@ websearch_to_tsquery('english', %s)", ["zebra"], BooleanField())
    plans = {}
    with transaction.atomic():
        for name, settings, order in (
            ("walk", module.WALK_PLAN, F("id").desc()),
            ("gin", module.GIN_PLAN, (F("id") + 0).desc()),
        ):
            with module._postgres_settings({**module.PLAN_SETTINGS, **settings}):
                plans[name] = Note.objects.filter(matches).order_by(order).values_list("id")[:WINDOW].explain()
    assert "Index Scan Backward using leases_note_pkey" in plans["walk"]
    assert "leases_note_search" not in plans["walk"]
    assert "leases_note_search" in plans["gin"]
    assert "Index Scan Backward" not in plans["gin"]
