"""Search ranks a window by construction (SPEC §25, issue 33): each kind's RANK_WINDOW newest visible
matches, the same on both databases and whichever of PostgreSQL's steps reaches them (the walk of the
newest id segments, the probe of the older ones, the walk on), and the answer says when it ranked a
window."""

from __future__ import annotations

import pytest
from django.db import connection

from core.db import postgres_settings
from leases import search as module
from leases.models import Note
from leases.search import search_answer
from ledger.models import Task
from tests.factories import AgentFactory, AttemptFactory, NoteFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

WINDOW = 3
# PostgreSQL's steps: with every row in a segment of its own and one segment walked first, a window needs
# the probe and the walk on; with the segments walked first unbounded, the first walk finds it all. SQLite
# has one way (FTS5 newest first): both run it.
PATHS = {"first walk": (10**6, False), "walk, probe, walk on": (1, True)}


def _next_segment(ids: int = 1 << module.SEGMENT_BITS) -> None:
    """PostgreSQL: the next task and note get ids a segment (or `ids`) further on (SQLite has no segments)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for table in ("ledger_task", "leases_note"):
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), nextval(pg_get_serial_sequence(%s, 'id')) + %s)",
                [table, table, ids],
            )


@pytest.fixture
def window(monkeypatch):
    monkeypatch.setattr(module, "RANK_WINDOW", WINDOW)


@pytest.fixture(params=sorted(PATHS))
def path(request, monkeypatch):
    first, spread = PATHS[request.param]
    monkeypatch.setattr(module, "FIRST_SEGMENTS", first)
    return spread


def _note(spread, **kwargs):
    if spread:
        _next_segment()
    return NoteFactory(**kwargs)


def _task(spread, **kwargs):
    if spread:
        _next_segment()
    return TaskFactory(**kwargs)


@pytest.fixture
def corpus(clock, path):
    """Six notes and five tasks with "zebra"; the oldest of each kind matches it best (the word three times)."""
    spread = path
    project = ProjectFactory(slug="zoo")
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Keeper rota"))
    notes = [_note(spread, attempt=attempt, content="zebra zebra zebra, the oldest and best match")]
    notes += [_note(spread, attempt=attempt, content=f"a zebra sighting, number {n}") for n in range(5)]
    tasks = [_task(spread, project=project, title="Zebra zebra zebra", description="The oldest task.")]
    tasks += [_task(spread, project=project, title=f"Task {n}", description="A zebra crossing.") for n in range(4)]
    return project, tasks, notes, attempt, spread


def _answer(query, **kwargs):
    answer = search_answer(query=query, limit=50, **kwargs)
    return sorted((hit.kind, hit.order) for hit in answer.hits), answer.windowed


def test_a_common_word_ranks_only_the_newest_window_of_each_kind(window, corpus):
    project, tasks, notes, _, _ = corpus
    hits, windowed = _answer("zebra", agent=None, project=project)
    newest = [("note", note.pk) for note in notes[-WINDOW:]] + [("task", task.pk) for task in tasks[-WINDOW:]]
    assert hits == sorted(newest)  # the best-matching oldest ones are outside the window
    assert windowed is True


def test_the_window_is_ranked_and_the_same_whatever_the_steps(window, clock, monkeypatch):
    """Every number of segments walked first gives the same hits, ranks and snippets."""
    project = ProjectFactory(slug="zoo")
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Keeper rota"))
    for n in range(8):
        _note(n % 3 == 0, attempt=attempt, content="zebra " * (1 + n % 4) + f"sighting {n}")
        _task(n % 2 == 0, project=project, title=f"Zebra {n}", description="zebra " * (n % 3))
    answers = {}
    for first in (1, 2, 3, 10**6):
        monkeypatch.setattr(module, "FIRST_SEGMENTS", first)
        answer = search_answer(query="zebra", agent=None, project=project, limit=50)
        answers[first] = [(hit.kind, hit.order, round(hit.rank, 6), hit.snippet) for hit in answer.hits]
    assert all(answer == answers[1] for answer in answers.values())
    ranks = [rank for _, _, rank, _ in answers[1]]
    assert len(ranks) == 2 * WINDOW
    assert ranks == sorted(ranks, reverse=True)
    assert all("**zebra" in snippet for kind, _, _, snippet in answers[1] if kind == "note")
    newest = {("note", pk) for pk in Note.objects.order_by("-id").values_list("id", flat=True)[:WINDOW]}
    tasks = Task.objects.filter(title__startswith="Zebra").order_by("-id")
    newest |= {("task", pk) for pk in tasks.values_list("id", flat=True)[:WINDOW]}
    assert {(kind, order) for kind, order, _, _ in answers[1]} == newest


def test_a_word_within_the_window_ranks_every_match(window, corpus):
    project, _, _, attempt, spread = corpus
    once = _note(spread, attempt=attempt, content="an okapi, once")
    assert _answer("okapi", agent=None, project=project) == ([("note", once.pk)], False)
    # Exactly the window's size is every match: not windowed.
    for n in range(WINDOW - 1):
        _note(spread, attempt=attempt, content=f"okapi {n}")
    hits, windowed = _answer("okapi", agent=None, project=project)
    assert (len(hits), windowed) == (WINDOW, False)


def test_the_window_is_the_newest_matches_the_agent_may_see(window, corpus):
    """Newer matches in a project the agent is not in neither show nor push its own out of the window."""
    project, tasks, notes, _, spread = corpus
    agent = AgentFactory(projects=[project])
    hidden = ProjectFactory(slug="hidden")
    other = AttemptFactory(task=TaskFactory(project=hidden, title="Zebra secrets", description="zebra"))
    for n in range(WINDOW + 2):
        _note(spread, attempt=other, content=f"a hidden zebra {n}")
        _task(spread, project=hidden, title=f"Hidden zebra {n}")
    hits, windowed = _answer("zebra", agent=agent)
    newest = [("note", note.pk) for note in notes[-WINDOW:]] + [("task", task.pk) for task in tasks[-WINDOW:]]
    assert (hits, windowed) == (sorted(newest), True)
    # A project of its own, only: the same window; another's project: NOT_FOUND at the API (tested there).
    assert _answer("zebra", agent=agent, project=project) == (sorted(newest), True)


def test_the_api_says_when_it_ranked_a_window(window, corpus):
    from tests.api.conftest import client_for

    project, _, _, _, _ = corpus
    client = client_for(AgentFactory(projects=[project]))
    body = client.get("/api/v1/search/?q=zebra").json()
    assert (len(body["results"]), body["windowed"]) == (2 * WINDOW, True)
    body = client.get("/api/v1/search/?q=oldest").json()
    assert (len(body["results"]), body["windowed"]) == (2, False)


def test_the_walk_reads_gin_segment_by_segment_and_stops(clock):
    """PostgreSQL: the walk is a nested loop over the segments, newest first, each a GIN bitmap, under the
    LIMIT (which stops it); a stretch read whole, the probe and the skip read GIN too; none walks the
    primary key."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's segments; SQLite has one way (FTS5 newest first)")
    from django.db import transaction

    plans = {}
    walk, stretch, probe, skip, skip_to_rows = module._postgres_sql("leases_note", False)
    settings = {**module.PLAN_SETTINGS, **module.GIN_PLAN}
    with transaction.atomic(), postgres_settings(settings), connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + walk, [5, 0, "zebra", "zebra", 4])
        plans["walk"] = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + stretch, ["zebra", "zebra", 0, 4096, 4])
        plans["stretch"] = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + probe, ["zebra", "zebra", 4096, 4])
        plans["probe"] = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + skip, [5, "zebra"])
        plans["skip"] = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + skip_to_rows, [5, "' p1'"])
        plans["skip to rows"] = "\n".join(row[0] for row in cursor.fetchall())
    lines = [line.strip() for line in plans["walk"].splitlines()]
    assert lines[0].startswith("Limit")
    assert lines[1].startswith("->  Nested Loop")
    assert lines[2].startswith("->  Function Scan on generate_series")
    assert "Bitmap Index Scan on leases_note_search" in plans["walk"]
    assert "Bitmap Index Scan on leases_note_search" in plans["probe"]
    stretch_nodes = [line.strip() for line in plans["stretch"].splitlines() if "(cost=" in line]
    assert stretch_nodes[0].startswith("Sort")  # the stretch's matches read up to the LIMIT, then sorted
    assert any(node.startswith("->  Limit") for node in stretch_nodes[1:])
    assert "Bitmap Index Scan on leases_note_search" in plans["stretch"]
    skip_lines = [line.strip() for line in plans["skip"].splitlines()]
    assert skip_lines[0].startswith("Limit")
    assert skip_lines[1].startswith("->  Nested Loop")
    assert skip_lines[2].startswith("->  Function Scan on generate_series")
    assert "Bitmap Index Scan on leases_note_search" in plans["skip"]
    assert "Bitmap Index Scan on leases_note_search" in plans["skip to rows"]
    every = "".join(plans.values())
    assert "Index Scan Backward" not in every
    assert "Seq Scan" not in every


def test_a_row_holds_its_segment_which_no_query_finds(clock):
    """PostgreSQL: the stored vector names the row's id segment; a search for the number finds nothing,
    and the rank is the rank without it."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's segments")
    project = ProjectFactory(slug="zoo")
    _next_segment()
    note = NoteFactory(attempt__task__project=project, content="a zebra")
    segment = note.pk >> module.SEGMENT_BITS
    assert segment > 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT search_vector @@ quote_literal(' ' || %s)::tsquery, ts_rank(search_vector, q) "
            "= ts_rank(to_tsvector('english', content), q) FROM leases_note, websearch_to_tsquery('zebra') q "
            "WHERE id = %s",
            [segment, note.pk],
        )
        assert cursor.fetchone() == (True, True)
    hits, _ = module.search(query=str(segment), agent=None, project=project)
    assert hits == []


def test_a_row_holds_its_project_and_a_move_carries_its_notes(clock):
    """PostgreSQL: a task's and a note's stored vectors name their project (migration leases 0025); a task
    moved to another project takes its notes' with it, so a search follows the move at once."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's project lexemes; SQLite checks visibility per match")
    zoo, farm = ProjectFactory(slug="zoo"), ProjectFactory(slug="farm")
    task = TaskFactory(project=zoo, title="Zebra rota")
    note = NoteFactory(attempt__task=task, content="a zebra escaped")
    keeper, farmer = AgentFactory(projects=[zoo]), AgentFactory(projects=[farm])

    def lexemes():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT array_agg(l) FILTER (WHERE l LIKE ' p%%') FROM unnest(tsvector_to_array("
                "search_vector)) l) FROM ledger_task WHERE id = %s UNION ALL "
                "SELECT (SELECT array_agg(l) FILTER (WHERE l LIKE ' p%%') FROM unnest(tsvector_to_array("
                "search_vector)) l) FROM leases_note WHERE id = %s",
                [task.pk, note.pk],
            )
            return [row[0] for row in cursor.fetchall()]

    def found(agent):
        return sorted(hit.kind for hit in search_answer(query="zebra", agent=agent).hits)

    assert lexemes() == [[f" p{zoo.pk}"], [f" p{zoo.pk}"]]
    assert (found(keeper), found(farmer)) == (["note", "task"], [])
    Task.objects.filter(pk=task.pk).update(project=farm)
    assert lexemes() == [[f" p{farm.pk}"], [f" p{farm.pk}"]]
    assert (found(keeper), found(farmer)) == ([], ["note", "task"])
    # The word's own lexemes are untouched by the move: the rank is the rank of the text alone.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ts_rank(search_vector, q) = ts_rank(to_tsvector('english', content), q) "
            "FROM leases_note, websearch_to_tsquery('zebra') q WHERE id = %s",
            [note.pk],
        )
        assert cursor.fetchone() == (True,)


def test_visibility_is_read_from_the_index_not_looked_up_per_match(clock):
    """PostgreSQL: a scoped search's statements read the projects from GIN: no attempt or task lookup per
    note matched, so matches in other projects are never read from the heap."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's project lexemes")
    from django.db import transaction

    zoo, hidden = ProjectFactory(slug="zoo"), ProjectFactory(slug="hidden")
    NoteFactory(attempt__task__project=zoo, content="one zebra")
    for n in range(5):
        NoteFactory(attempt__task__project=hidden, content=f"a hidden zebra {n}")
    probe = module._postgres_sql("leases_note", True).probe
    scope = module._postgres_scope([zoo.pk])
    settings = {**module.PLAN_SETTINGS, **module.GIN_PLAN}
    with transaction.atomic(), postgres_settings(settings), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + probe, ["zebra", "zebra", *scope, 10**9, 10])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on leases_note_search" in plan
    assert "leases_attempt" not in plan
    assert "ledger_task" not in plan
    index = next(line for line in plan.splitlines() if "Bitmap Index Scan" in line)
    assert "rows=1 loops" in index  # the caller's one match of six: the hidden five never left the index


def test_the_walk_on_skips_stretches_without_a_match(window, clock, monkeypatch):
    """PostgreSQL: matches that are all old, years of empty segments apart, are found by skipping each
    empty stretch at once: the same window as the newest matches by id, two skips, no segment walked
    one by one across the gap."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's stretches")
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(module, "FIRST_SEGMENTS", 1)
    project = ProjectFactory(slug="zoo")
    attempt = AttemptFactory(task=TaskFactory(project=project, title="Keeper rota"))
    stretch = 1 << module.COARSE_BITS
    old = [NoteFactory(attempt=attempt, content=f"an old zebra {n}") for n in range(4)]
    _next_segment(5 * stretch)
    middle = NoteFactory(attempt=attempt, content="a middle zebra")
    _next_segment(3 * stretch + 5 * (1 << module.SEGMENT_BITS))
    newest = NoteFactory(attempt=attempt, content="the newest zebra")
    _next_segment(2 << module.SEGMENT_BITS)
    NoteFactory(attempt=attempt, content="a horse in the newest segment")
    with CaptureQueriesContext(connection) as queries:
        hits, windowed = _answer("zebra", agent=None, project=project)
    assert (hits, windowed) == (sorted(("note", note.pk) for note in (newest, middle, old[-1])), True)
    found = _statements(queries)
    # The newest stretch read at once; a skip before each older stretch with a match, each read at once,
    # `old`'s walked too: the window ends in it.
    assert (found["walk"], found["stretch"], found["skip"]) == (1, 3, 2)


def test_a_caller_who_sees_every_project_searches_unscoped_and_the_page_is_checked(clock, monkeypatch):
    """PostgreSQL: the project lexemes are intersected only when the caller's projects are not all of
    them; a hit of a project the caller may not see (made while an unscoped search ran) is never shown."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's project lexemes")
    from django.test.utils import CaptureQueriesContext

    zoo = ProjectFactory(slug="zoo")
    NoteFactory(attempt__task__project=zoo, content="a zebra at the zoo")
    keeper = AgentFactory(projects=[zoo])

    def scoped(agent):
        with CaptureQueriesContext(connection) as queries:
            hits = search_answer(query="zebra", agent=agent).hits
        statements = [query["sql"] for query in queries.captured_queries if "leases_note hit" in query["sql"]]
        return [hit.task for hit in hits], any("' p" in sql for sql in statements)

    assert scoped(keeper) == ([Task.objects.get(project=zoo).key], False)  # the only project: unscoped
    hidden = ProjectFactory(slug="hidden")
    NoteFactory(attempt__task__project=hidden, content="a hidden zebra")
    assert scoped(keeper) == ([Task.objects.get(project=zoo).key], True)
    # The race: the scope decided before the hidden project's rows came (here: dropped outright).
    monkeypatch.setattr(module.Project.objects, "exclude", lambda **kwargs: module.Project.objects.none())
    assert scoped(keeper) == ([Task.objects.get(project=zoo).key], False)


def _statements(queries) -> dict[str, int]:
    statements = [
        query["sql"]
        for query in queries.captured_queries
        if "leases_note hit" in query["sql"] and not query["sql"].startswith("EXPLAIN")
    ]
    return {
        "walk": sum("segment(number)" in sql for sql in statements),
        "stretch": sum("AS hit ORDER BY hit.id DESC" in sql for sql in statements),
        "skip": sum("stretch(number)" in sql and "websearch" in sql for sql in statements),
        "skip to rows": sum("stretch(number)" in sql and "websearch" not in sql for sql in statements),
        "probe": sum("hit.id + 0 <" in sql and "AS hit ORDER" not in sql for sql in statements),
    }


@pytest.fixture
def stretches(clock, monkeypatch):
    """PostgreSQL: a window of 20, a table never walked whole at once (FIRST_SEGMENTS 1), and a project's
    attempt to write notes stretches apart; the attempt and the stretch's size in ids."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's stretches")
    monkeypatch.setattr(module, "RANK_WINDOW", 20)
    monkeypatch.setattr(module, "FIRST_SEGMENTS", 1)
    project = ProjectFactory(slug="zoo")
    return AttemptFactory(task=TaskFactory(project=project, title="Keeper rota")), 1 << module.COARSE_BITS


@pytest.mark.parametrize("statistics", ["rare", "wrong"])
def test_a_rare_word_spread_over_the_years_is_probed(stretches, monkeypatch, statistics):
    """PostgreSQL: one match per stretch, many stretches apart. When the planner's estimate calls the word
    rare, the probe reads every older match at once after the first walk; when the estimate is wrong
    (here: forced to call every word common), the probe runs once a stretch with a match held one,
    instead of a skip and a walk per stretch. The same answer either way."""
    from django.test.utils import CaptureQueriesContext

    if statistics == "wrong":
        monkeypatch.setattr(module, "PROBE_FIRST_ESTIMATE", 0)
    attempt, stretch = stretches
    project = attempt.task.project
    zebras = []
    for n in range(6):
        zebras.append(NoteFactory(attempt=attempt, content=f"a zebra of year {n}"))
        _next_segment(2 * stretch)
    NoteFactory(attempt=attempt, content="a horse in the newest segment")
    with CaptureQueriesContext(connection) as queries:
        hits, windowed = _answer("zebra", agent=None, project=project)
    assert (hits, windowed) == (sorted(("note", note.pk) for note in zebras), False)
    # Rare: one probe of the whole table finds them all. Wrong: the first stretch with a match may be only
    # partly the word's, so the probe waits for the second.
    expected = (
        {"walk": 0, "stretch": 0, "skip": 0, "skip to rows": 0, "probe": 1}
        if statistics == "rare"
        else {"walk": 0, "stretch": 3, "skip": 2, "skip to rows": 0, "probe": 1}
    )
    assert _statements(queries) == expected


@pytest.mark.parametrize("estimate", ["sparse", "dense"])
def test_a_word_a_skipped_to_stretch_holds_plenty_of_is_walked_on_not_probed(stretches, monkeypatch, estimate):
    """PostgreSQL: the probe builds GIN's bitmap of every older match before its LIMIT: a word the planner
    calls common (forced here) that a stretch holds plenty of is walked on stretch by stretch, and the
    probe never runs. Where the estimate spread over the ids says the newest stretch holds the window
    (forced: "dense"), it is walked segment by segment, not read at once; the same window either way."""
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(module, "PROBE_FIRST_ESTIMATE", 0)
    if estimate == "dense":
        monkeypatch.setattr(module, "ESTIMATE_MARGIN", 10**9)
    attempt, stretch = stretches
    project = attempt.task.project
    oldest = [NoteFactory(attempt=attempt, content=f"an old zebra {n}") for n in range(30)]
    _next_segment(3 * stretch)
    newer = [NoteFactory(attempt=attempt, content=f"a newer zebra {n}") for n in range(10)]
    _next_segment(3 * stretch)
    NoteFactory(attempt=attempt, content="a horse in the newest segment")
    with CaptureQueriesContext(connection) as queries:
        hits, windowed = _answer("zebra", agent=None, project=project)
    assert (hits, windowed) == (sorted(("note", note.pk) for note in [*oldest[-10:], *newer]), True)
    # Sparse: the newest stretch and `newer`'s read at once; `oldest`'s holds more than the window lacks:
    # walked segment by segment. Dense: the newest and `newer`'s walked; `oldest`'s as before.
    expected = {"sparse": (1, 3), "dense": (3, 1)}[estimate]
    assert _statements(queries) == {
        "walk": expected[0],
        "stretch": expected[1],
        "skip": 2,
        "skip to rows": 0,
        "probe": 0,
    }


def _at(next_id: int) -> None:
    """PostgreSQL: the next note gets id `next_id`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence('leases_note', 'id'), %s, false)", [next_id])


def test_matches_that_go_on_into_a_stretchs_lowest_segment_are_walked_on_without_a_skip(stretches, monkeypatch):
    """PostgreSQL: a walk whose matches go on into its stretch's lowest segment walks the next stretch at
    once (the matches likely go on there); a walk that found none skips to the newest stretch with one.
    The same window as the newest matches by id."""
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(module, "PROBE_FIRST_ESTIMATE", 0)
    attempt, stretch = stretches
    project = attempt.task.project
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM leases_note_id_seq")
        base = (cursor.fetchone()[0] // stretch + 1) * stretch
    _at(base + 1)
    older = [NoteFactory(attempt=attempt, content=f"an older zebra {n}") for n in range(30)]  # stretch B
    _at(base + 3 * stretch - (1 << module.SEGMENT_BITS))  # the top segment of stretch B + 2
    near = [NoteFactory(attempt=attempt, content=f"a zebra {n}") for n in range(3)]
    _at(base + 3 * stretch)  # the lowest segment of stretch B + 3
    lowest = [NoteFactory(attempt=attempt, content=f"a newer zebra {n}") for n in range(2)]
    _at(base + 5 * stretch)
    NoteFactory(attempt=attempt, content="a horse in the newest segment")
    with CaptureQueriesContext(connection) as queries:
        hits, windowed = _answer("zebra", agent=None, project=project)
    assert (hits, windowed) == (sorted(("note", note.pk) for note in [*older[-15:], *near, *lowest]), True)
    # The newest stretch read; a skip to B + 3, read: its two matches are in its lowest segment, so B + 2 is
    # read at once; its matches are in its top segment only: a skip to B, whose matches are more than the
    # window lacks: read, then walked segment by segment.
    assert _statements(queries) == {"walk": 1, "stretch": 4, "skip": 2, "skip to rows": 0, "probe": 0}


def test_a_scoped_search_skips_to_the_callers_rows_first_where_they_are_old(stretches, monkeypatch):
    """PostgreSQL: where a scoped search has found nothing in the newest stretch, its first skip is to the
    newest stretch with any of the caller's rows, the words left out (half the index work of a skip);
    from there the walk goes on as ever: a stretch of the caller's without the word is read and skipped
    past. Another project's newer matches are never read."""
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(module, "PROBE_FIRST_ESTIMATE", 0)
    attempt, stretch = stretches
    zoo = attempt.task.project
    farm = AttemptFactory(task=TaskFactory(project=ProjectFactory(slug="farm"), title="Barn rota"))
    keeper = AgentFactory(projects=[zoo])
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM leases_note_id_seq")
        base = (cursor.fetchone()[0] // stretch + 1) * stretch
    _at(base + stretch // 2)  # the middle of stretch B
    zebras = [NoteFactory(attempt=attempt, content=f"an old zebra {n}") for n in range(5)]
    _at(base + 2 * stretch + stretch // 2)  # B + 2: the zoo's newest row, without the word
    NoteFactory(attempt=attempt, content="a horse at the zoo")
    _at(base + 4 * stretch)  # B + 4 and on: the farm's
    for n in range(3):
        NoteFactory(attempt=farm, content=f"a farm zebra {n}")
    _at(base + 6 * stretch)
    NoteFactory(attempt=farm, content="a cow in the newest segment")
    with CaptureQueriesContext(connection) as queries:
        hits, windowed = _answer("zebra", agent=keeper)
    assert (hits, windowed) == (sorted(("note", note.pk) for note in zebras), False)
    # The newest stretch read (the farm's); a skip to the zoo's rows (B + 2), read: no zebra; a skip to the
    # zebras (B), read; a skip below them finds none.
    assert _statements(queries) == {"walk": 0, "stretch": 3, "skip": 2, "skip to rows": 1, "probe": 0}


@pytest.mark.parametrize("offset", [0, 1, 2, 4])
def test_the_page_is_the_ranked_order_of_every_kinds_rows(offset):
    """Only the page is ordered (`_ranked_page`), and it is the page of the whole order: best rank first,
    a task before a note on a tie, then newer first; `more` while rows follow the page."""
    found = {"task": [(7, 0.5), (3, 0.9)], "note": [(9, 0.5), (8, 0.9), (2, 0.1)]}
    whole = sorted(
        ((kind, pk, rank) for kind, rows in found.items() for pk, rank in rows),
        key=lambda row: (-row[2], row[0] != "task", -row[1]),
    )
    assert [row[:2] for row in whole] == [("task", 3), ("note", 8), ("task", 7), ("note", 9), ("note", 2)]
    page, more = module._ranked_page(found, offset, 2)
    assert [(c.kind, c.id, c.rank) for c in page] == whole[offset : offset + 2]
    assert more == (offset + 2 < len(whole))
