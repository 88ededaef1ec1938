"""Search over task titles and descriptions and note contents, scoped to the caller's projects (SPEC §25).

Indexed on both databases (migration `leases.0020_search_index`):

- PostgreSQL: a stored `search_vector` tsvector on `ledger_task` (title
  weight A, the first SEARCHABLE_CHARS characters of the description weight
  B) and on `leases_note` (content), kept by BEFORE triggers, each under a GIN
  index. Matching is `websearch_to_tsquery('english', …)`, ranking
  `ts_rank` over the stored vector.
- SQLite: FTS5 external-content tables `ledger_task_fts` (title,
  description) and `leases_note_fts` (content), porter-stemmed, kept by
  triggers; ranking `bm25` (title weighted as PostgreSQL's A against B).

Ranking is bounded by construction (SPEC §25's 200 ms at 1M tasks / 3M
notes): each kind (tasks, notes) ranks only its RANK_WINDOW newest visible
matches (by id), the same window on both databases, so a word in every sixth
note costs what a rare one does. The answer says when a window was ranked
rather than every match (`SearchAnswer.windowed`). Finding the window:

- SQLite: the FTS5 match walked newest first (`ORDER BY rowid DESC`), each
  rowid checked for visibility, stopping at RANK_WINDOW + 1.
- PostgreSQL: each stored vector also holds its row's id segment (`id >>
  SEGMENT_BITS`, a lexeme no text produces: migration `leases.0024`), so GIN
  finds one segment's matches by intersecting two posting lists (and a stretch's
  likewise: `leases.0025`). The ids are read newest first, a stretch of 16
  segments at a time (one GIN scan a
  stretch, or one a segment where the window ends: a common word stops in the
  newest segments), each stretch without a match skipped at once, to the
  window's end; a word PostgreSQL's statistics call rare, or one a walk past the
  first with a match finds few of, is probed through GIN, its older matches in
  no order up to the rest of the window (a rare word has them all then)
  (`_postgres_window_rows`). The heap reads are bounded by the window (at most
  about three windows and one segment's matches, and the probe's), whatever the
  word's count in the table. Visibility is in the index too: each vector holds its
  row's project as a lexeme (migration `leases.0025`), and the caller's
  projects are one more posting list to intersect, so a match in a project
  the caller may not see is never read.

The answers are the same hits on both (the query is read the same way:
`leases.search_text`); the order among hits may differ where the two
databases' ranking functions weigh term frequency differently. Snippets are
cut by the same code on both from each database's marks of the matching words,
for the page's hits only (`leases.search_text.snippet`).

Each request's time is bounded: LEASEHOLD_SEARCH_TIMEOUT_MS as a
`statement_timeout` on PostgreSQL and a progress handler on SQLite; past it
the answer is SEARCH_TOO_BROAD (a query that matches too much to rank in
time), never a held thread.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from core.db import postgres_settings
from core.errors import SearchTooBroad
from leases.models import Note
from leases.search_text import (
    MARK_START,
    MARK_STOP,
    SNIPPET_MAX_CHARS,
    ParsedQuery,
    fts5_expression,
    parse,
    snippet,
    websearch_text,
)
from leases.selectors import notes_visible_to
from ledger.models import Agent, Project, Task
from ledger.selectors import projects_visible_to, tasks_visible_to

logger = logging.getLogger(__name__)

__all__ = [
    "COARSE_BITS",
    "FIRST_SEGMENTS",
    "RANK_WINDOW",
    "SEARCHABLE_CHARS",
    "SEGMENT_BITS",
    "SNIPPET_MAX_CHARS",
    "SearchAnswer",
    "SearchHit",
    "flush_pending_entries",
    "search",
    "search_answer",
    "websearch_text",
]

SEARCHABLE_CHARS = 100_000  # PostgreSQL caps a tsvector at 1 MB; the triggers index this much of a description
TITLE_WEIGHT = 2.5  # SQLite's bm25 column weight of a title against a description (PostgreSQL: A 1.0, B 0.4)
SQLITE_PROGRESS_STEPS = 1000  # virtual-machine steps between two looks at the clock
# Each kind ranks its RANK_WINDOW newest visible matches, on both databases (docs/api.md, "search").
RANK_WINDOW = 1000
# PostgreSQL: the id segments the stored vectors name (migration leases 0024 holds the same number): the
# walk's unit, so its heap reads past the window are at most one segment's matches.
SEGMENT_BITS = 12
# PostgreSQL: the id stretches the stored vectors also name (migration leases 0025 holds the same number):
# 16 segments, the unit the walk skips when a stretch has no match.
COARSE_BITS = 16
# PostgreSQL: a table of at most this many segments is walked whole in one statement, the window read at
# once (docs/performance.md, "Search, round three" and "six").
FIRST_SEGMENTS = 8
# PostgreSQL: the probe of the older matches runs first when the planner's estimate of them is at most
# this many windows (a rare word), and otherwise once a stretch with a match held fewer than
# 1/SPARSE_STRETCHES of what the window still lacks (docs/performance.md, "Search, round five").
PROBE_FIRST_ESTIMATE = 2
SPARSE_STRETCHES = 8
# PostgreSQL: the newest stretch is read at once, not walked segment by segment, when the planner's estimate
# of the matches, spread evenly over the ids and taken this many times over, puts fewer there than the
# window (the newest ids often hold more than their share).
ESTIMATE_MARGIN = 4
# PostgreSQL's plan for a search is always the text index first, then primary-key lookups per match.
# A rare word's row estimate is a default (0.5 % of the table), which made the planner hash-join the
# visibility joins over every attempt and task and compile JIT code (0.2 ms of index work, 600 ms of
# plan at 1M tasks: docs/performance.md, "Search, indexed"). These hold for the search's statements only.
PLAN_SETTINGS = {
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "jit": "off",
}
# The window's statements read the rows through GIN (their order is written `id + 0`, which no index
# serves; sequential and plain index scans are off): never a walk of the primary key. With plain index
# scans on, the planner, which cannot know a segment's share of the table, walked the whole primary key
# once per segment (docs/performance.md, "Search, round three"); the visibility lookups are bitmap scans.
GIN_PLAN = {"enable_seqscan": "off", "enable_indexscan": "off"}


@dataclass(frozen=True)
class SearchHit:
    kind: str  # "task" or "note"
    task: str
    title: str
    note: int | None
    attempt: int | None
    snippet: str
    rank: float
    order: int  # tie-breaker: newer first


@dataclass(frozen=True)
class SearchAnswer:
    hits: list[SearchHit]
    more: bool  # more hits follow this page
    windowed: bool  # some kind matched more than RANK_WINDOW visible rows: its newest RANK_WINDOW were ranked


@dataclass(frozen=True)
class _Candidate:
    kind: str
    id: int
    rank: float


def _timeout_ms() -> int:
    return int(settings.LEASEHOLD_SEARCH_TIMEOUT_MS)


def _too_broad() -> SearchTooBroad:
    seconds = _timeout_ms() / 1000
    return SearchTooBroad(
        f"The search did not finish within {seconds:g} s; add words or a project to narrow it.",
        details={"timeout_ms": _timeout_ms()},
    )


@contextmanager
def _bounded() -> Iterator[None]:
    """Statements inside end within the search timeout, or SEARCH_TOO_BROAD."""
    if connection.vendor == "postgresql":
        # In the caller's transaction, SET LOCAL would outlive the search: the settings are restored.
        with transaction.atomic(), postgres_settings({**PLAN_SETTINGS, "statement_timeout": str(_timeout_ms())}):
            try:
                yield
            except OperationalError as exc:
                if "statement timeout" in str(exc):
                    raise _too_broad() from exc
                raise
        return
    connection.ensure_connection()
    raw = connection.connection
    deadline = time.monotonic() + _timeout_ms() / 1000
    raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, SQLITE_PROGRESS_STEPS)
    try:
        yield
    except OperationalError as exc:
        if "interrupted" in str(exc):
            raise _too_broad() from exc
        raise
    finally:
        raw.set_progress_handler(None, 0)


# --- PostgreSQL -----------------------------------------------------------------------------------


def _postgres_scope(projects: list[int]) -> list[str]:
    """The caller's projects as a tsquery of project lexemes (migration `leases.0025`), the one parameter
    of a scoped statement: GIN intersects it with the word's posting list, so a match in another
    project is never read from the heap (a note's project was two primary-key lookups a match:
    docs/performance.md, "Search, round four")."""
    return [" | ".join(f"' p{pk}'" for pk in projects)]


class _Statements(NamedTuple):
    walk: str
    stretch: str
    probe: str
    skip: str
    skip_to_rows: str


def _postgres_sql(table: str, scoped: bool) -> _Statements:
    """The window's five statements over `table` (a constant of this module; the query is a parameter),
    `scoped`: with the caller's projects (`_postgres_scope`) as a parameter after the query's.

    The walk: segments `top` down to `bottom`, newest first, each one's matches through GIN (the word's
    posting list intersected with the segment's, and the projects') sorted newest first, the whole cut
    at its LIMIT: the nested loop over `generate_series` emits segment after segment, so the LIMIT
    stops the walk. The stretch: one stretch's matches (COARSE_BITS of ids) below an id in one GIN scan,
    at most its LIMIT of them ranked, newest first (all of them when fewer came). The
    probe: the matches below an id through GIN, in no order, at most its LIMIT. The skip: the newest
    stretch at or below a number with any match, through GIN, one row read at most. The skip to rows
    (scoped): the same for any row of the caller's projects, the words left out (two scan keys a
    stretch, not three: half the index work where a project's rows are old)."""
    rank = "ts_rank(hit.search_vector, websearch_to_tsquery('english', %s))"
    # Each condition its own `@@`, so each is a scan key of its own: GIN leapfrogs across keys (each
    # jumps past the others' next match), while the lexemes of one tsquery are read by iterating the
    # rarest of them whole (a stretch's 65,536 entries, a segment's 4,096: docs/performance.md, "Search,
    # round four").
    match = "hit.search_vector @@ websearch_to_tsquery('english', %s)"
    if scoped:
        match += " AND hit.search_vector @@ %s::tsquery"
    walk = (
        f"SELECT hit.id, hit.rank FROM generate_series(%s::bigint, %s::bigint, -1) AS segment(number) "  # noqa: S608
        f"CROSS JOIN LATERAL (SELECT hit.id, {rank} AS rank FROM {table} hit WHERE {match} "
        "AND hit.search_vector @@ quote_literal(' ' || segment.number)::tsquery "
        "ORDER BY hit.id + 0 DESC) AS hit LIMIT %s"
    )
    stretch = (
        f"SELECT hit.id, {rank} FROM (SELECT hit.id, hit.search_vector FROM {table} hit WHERE {match} "  # noqa: S608
        "AND hit.search_vector @@ quote_literal(' c' || %s)::tsquery AND hit.id + 0 < %s LIMIT %s) AS hit "
        "ORDER BY hit.id DESC"
    )
    probe = f"SELECT hit.id, {rank} FROM {table} hit WHERE {match} AND hit.id + 0 < %s LIMIT %s"  # noqa: S608
    skip = (
        "SELECT stretch.number FROM generate_series(%s::bigint, 0, -1) AS stretch(number) "  # noqa: S608
        f"CROSS JOIN LATERAL (SELECT 1 FROM {table} hit WHERE {match} "
        "AND hit.search_vector @@ quote_literal(' c' || stretch.number)::tsquery LIMIT 1) AS hit LIMIT 1"
    )
    skip_to_rows = (
        "SELECT stretch.number FROM generate_series(%s::bigint, 0, -1) AS stretch(number) "  # noqa: S608
        f"CROSS JOIN LATERAL (SELECT 1 FROM {table} hit WHERE hit.search_vector @@ %s::tsquery "
        "AND hit.search_vector @@ quote_literal(' c' || stretch.number)::tsquery LIMIT 1) AS hit LIMIT 1"
    )
    return _Statements(walk, stretch, probe, skip, skip_to_rows)


Rows = list[tuple[int, float]]


def _postgres_window_rows(
    run: Callable[[str, list[Any]], Rows], table: str, scope: list[str], text: str, last: int
) -> Rows:
    """The newest RANK_WINDOW + 1 visible matches of `text` in `table` (whose last id is `last`), newest
    first, with their rank; `run(sql, params)` runs a statement under PLAN_SETTINGS and GIN_PLAN and
    returns its rows (the service's cursor; the bench's raw reference its own).

    Bounded by construction (docs/performance.md, "Search, round three" to "six"): the rows read from the
    heap are at most the window plus one segment's matches, one more window where a stretch read at once
    held more than the window lacked, the matches of a stretch's walked segments read again with the
    rest of it (at most the window), and the probe's; the index work is one posting-list intersection
    per segment walked, per stretch read or skipped, and the probe's.
    1. When the table is FIRST_SEGMENTS segments or fewer, walk them all at once: that is the window.
    2. When PostgreSQL's statistics put the word's matches at most PROBE_FIRST_ESTIMATE windows, probe the
       whole table through GIN, in no order: fewer rows than the window are all there is (a rare word
       stops here, the probe's heap reads at most the window).
    3. Walk, a stretch (COARSE_BITS of ids) at a time, from the newest. A stretch (or what is left of
       one) is read in one GIN scan, up to what the window lacks and one more, unless at the density of
       the last walk with a match (at first: the estimate spread over the ids, ESTIMATE_MARGIN times over)
       it would hold what the window lacks, or it held more than that: then it is walked segment by
       segment, and the window ends in it (a common word stops in the newest segments).
    4. Where a walk's matches go on into its lowest segment, they likely go on below it, and the next
       stretch is walked at once; otherwise one statement first skips to the newest stretch with a match
       (a word whose matches are all old crosses the empty years a stretch, not a segment, at a time). A
       scoped search with no match yet skips first to the newest stretch with any row of the caller's
       projects, the words left out: where a project's rows are old, under years of other projects',
       that is most of the crossing, at half the index work.
    5. If a walk held fewer than 1/SPARSE_STRETCHES of what the window still lacks, and it is not the
       first walk on that held any match (where the matches begin, a stretch is only partly theirs), the
       statistics were wrong and the word is rare after all: probe once as in 2.
    The probe's index work is every older match: GIN builds its whole bitmap before the LIMIT. So it
    runs only where the word looks rare; before round five it always ran, and at a million notes a
    common word's probe read 121,000 matches to throw them away (docs/performance.md, "Search, round
    five"). The estimate only orders the steps: every path gives the same window.
    """
    sql = _postgres_sql(table, bool(scope))
    need = RANK_WINDOW + 1
    top = last >> SEGMENT_BITS
    bottom = max(top - FIRST_SEGMENTS + 1, 0)
    if bottom == 0:
        return run(sql.walk, [top, 0, text, text, *scope, need])
    probe_params = [text, text, *scope, last + 1, need]
    estimate = _estimated_rows(run, sql.probe, probe_params)
    probed = estimate <= PROBE_FIRST_ESTIMATE * need
    if probed:  # the statistics call the word rare: its matches are likely fewer than the window
        found = run(sql.probe, probe_params)
        if len(found) < need:
            return sorted(found, key=lambda row: -row[0])
    shift = COARSE_BITS - SEGMENT_BITS
    rows: Rows = []
    # `reached`: the next walk starts at `segment`, no skip first; `density`: matches a segment where the last
    # walk with any found them (at first the estimate spread over the ids, ESTIMATE_MARGIN times over);
    # `held`: walks that found any; `to_rows`: the next skip is to the caller's rows.
    segment, reached, held, to_rows = top, True, 0, bool(scope)
    density = ESTIMATE_MARGIN * estimate / (top + 1)
    while segment >= 0 and len(rows) < need:
        wanted = need - len(rows)
        if not reached:  # the newest stretch at or below `segment` with a match (or a row): walk on there
            if to_rows and not rows:
                stretch = run(sql.skip_to_rows, [segment >> shift, *scope])
            else:
                stretch = run(sql.skip, [segment >> shift, text, *scope])
            to_rows = False
            if not stretch:
                break
            segment = min(segment, ((stretch[0][0] + 1) << shift) - 1)
        first = segment >> shift << shift  # the first segment of this one's stretch
        # The stretch from `segment` down is read at once, unless the window likely ends in it (at the
        # density last met) or it holds more than the window lacks: then it is walked segment by segment.
        at_once = density * (segment - first + 1) < wanted
        below = (segment + 1) << SEGMENT_BITS
        walked = run(sql.stretch, [text, text, *scope, segment >> shift, below, wanted + 1]) if at_once else []
        if not at_once or len(walked) > wanted:
            walked = run(sql.walk, [segment, first, text, text, *scope, wanted])
        rows += walked
        density = len(walked) / (segment - first + 1) if walked else density
        if len(rows) >= need or first == 0:
            break
        wanted = need - len(rows)
        held += bool(walked)
        if held > 1 and not probed and len(walked) * SPARSE_STRETCHES < wanted:
            # A walk with a match held few: the word is rare here, so its older matches are few too.
            probed = True
            older = run(sql.probe, [text, text, *scope, first << SEGMENT_BITS, wanted])
            if len(older) < wanted:
                return rows + sorted(older, key=lambda row: -row[0])
        segment, reached = first - 1, _reached(walked, first)
    return rows


def _reached(walked: Rows, segment: int) -> bool:
    """Whether a walk's matches (newest first) go on into its lowest segment, `segment`: its last two
    rows are there (one match alone says little of what lies below it)."""
    return len(walked) > 1 and walked[-2][0] >> SEGMENT_BITS == segment


def _estimated_rows(run: Callable[[str, list[Any]], Rows], sql: str, params: list[Any]) -> float:
    """PostgreSQL's estimate of the matches `sql`'s index scan finds, before any filter or LIMIT (one plan,
    nothing read): the innermost node of its plan."""
    [(plan,)] = cast(list[tuple[Any]], run(f"EXPLAIN (FORMAT JSON) {sql}", params))
    node = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]  # Django's cursor leaves json as text
    while node.get("Plans"):
        node = node["Plans"][0]
    return float(node["Plan Rows"])


def _postgres_window(table: str, scope: list[str], text: str) -> Rows:
    """`_postgres_window_rows` on the service's connection."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(id) FROM {table}")  # noqa: S608 (the primary key's last entry)
        last = cursor.fetchone()[0]
    if last is None:
        return []
    with postgres_settings(GIN_PLAN), connection.cursor() as cursor:

        def run(sql: str, params: list[Any]) -> Rows:
            cursor.execute(sql, params)
            return cursor.fetchall()

        return _postgres_window_rows(run, table, scope, text, last)


def _caller_projects(agent: Agent | None, project: Project | None) -> list[int] | None:
    """The ids of the projects the caller searches: the agent's, or the one asked for if it is among
    them ([] if not); None: every project (staff, no project asked for)."""
    projects = None if agent is None else list(projects_visible_to(agent).values_list("pk", flat=True))
    if project is not None:
        projects = [project.pk] if projects is None or project.pk in projects else []
    return projects


def _postgres_candidates(query: str, projects: list[int] | None) -> tuple[dict[str, Rows], bool]:
    if projects == []:
        return {}, False
    text = websearch_text(query)
    scope: list[str] = []
    # A caller who sees every project searches unscoped: its projects' posting list would be every row,
    # one more list to intersect per segment for nothing (a project made meanwhile is caught by `_hits`).
    if projects is not None and Project.objects.exclude(pk__in=projects).exists():
        scope = _postgres_scope(projects)
    found: dict[str, Rows] = {}
    windowed = False
    for kind, table in (("task", "ledger_task"), ("note", "leases_note")):
        rows = _postgres_window(table, scope, text)
        windowed = windowed or len(rows) > RANK_WINDOW
        found[kind] = rows[:RANK_WINDOW]
    return found, windowed


def _postgres_marked(query: str, kind: str, ids: list[int]) -> dict[int, str]:
    column, table = ("description", "ledger_task") if kind == "task" else ("content", "leases_note")
    options = f'HighlightAll=true, StartSel="{MARK_START}", StopSel="{MARK_STOP}"'
    sql = (
        f"SELECT id, ts_headline('english', left({column}, %s), websearch_to_tsquery('english', %s), %s) "  # noqa: S608
        f"FROM {table} WHERE id = ANY(%s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [SEARCHABLE_CHARS, websearch_text(query), options, ids])
        return dict(cursor.fetchall())


# --- SQLite ---------------------------------------------------------------------------------------


def _sqlite_candidates(
    parsed: ParsedQuery, tasks: QuerySet[Task], notes: QuerySet[Note]
) -> tuple[dict[str, Rows], bool]:
    expression = fts5_expression(parsed)
    found: dict[str, Rows] = {}
    windowed = False
    for kind, fts, weights, scope in (
        ("task", "ledger_task_fts", f"{TITLE_WEIGHT}, 1.0", tasks),
        ("note", "leases_note_fts", "1.0", notes),
    ):
        # The match walked newest first, each row checked for visibility, up to the window's end.
        visible, params = scope.filter(pk=RawSQL(f"{fts}.rowid", [])).values("id").query.sql_with_params()  # noqa: S611
        sql = (
            f"SELECT rowid, -bm25({fts}, {weights}) FROM {fts} "  # noqa: S608
            f"WHERE {fts} MATCH %s AND EXISTS ({visible}) ORDER BY rowid DESC LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [expression, *params, RANK_WINDOW + 1])
            rows = cursor.fetchall()
        windowed = windowed or len(rows) > RANK_WINDOW
        found[kind] = rows[:RANK_WINDOW]
    return found, windowed


def _sqlite_marked(parsed: ParsedQuery, kind: str, ids: list[int]) -> dict[int, str]:
    fts, column = ("ledger_task_fts", 1) if kind == "task" else ("leases_note_fts", 0)
    marks = ", ".join(["%s"] * len(ids))
    sql = (
        f"SELECT rowid, highlight({fts}, {column}, %s, %s) FROM {fts} "  # noqa: S608
        f"WHERE {fts} MATCH %s AND rowid IN ({marks})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [MARK_START, MARK_STOP, fts5_expression(parsed), *ids])
        return dict(cursor.fetchall())


# --- both -----------------------------------------------------------------------------------------


def _ranked_page(found: dict[str, Rows], offset: int, limit: int) -> tuple[list[_Candidate], bool]:
    """The page `offset:offset + limit` of every kind's (id, rank) rows ranked best first (tasks before
    notes on a tie, then newer first), and whether more follow. Only the page's rows are ordered and made
    candidates (`heapq.nsmallest`): at 1M a window of 1,000 rows sorted whole as objects was about 1 ms
    of the request (docs/performance.md, "Search, round seven")."""
    keys = ((-float(rank), kind != "task", -pk) for kind, rows in found.items() for pk, rank in rows)
    page = heapq.nsmallest(offset + limit, keys)[offset:]
    total = sum(len(rows) for rows in found.values())
    return [_Candidate("note" if noted else "task", -pk, -rank) for rank, noted, pk in page], total > offset + limit


def _hits(page: list[_Candidate], marked: dict[tuple[str, int], str], projects: list[int] | None) -> list[SearchHit]:
    """The page's hits, each checked once more against the caller's projects (None: every one): a row
    of a project made while the search ran unscoped is left out, never shown."""
    task_ids = [c.id for c in page if c.kind == "task"]
    note_ids = [c.id for c in page if c.kind == "note"]
    tasks = {row["id"]: row for row in Task.objects.filter(id__in=task_ids).values("id", "key", "title", "project_id")}
    notes = {
        row["id"]: row
        for row in Note.objects.filter(id__in=note_ids).values(
            "id", "attempt_id", "attempt__task__key", "attempt__task__title", "attempt__task__project_id"
        )
    }
    hits = []
    for candidate in page:
        owner = (
            tasks[candidate.id]["project_id"]
            if candidate.kind == "task"
            else notes[candidate.id]["attempt__task__project_id"]
        )
        if projects is not None and owner not in projects:
            continue
        text = marked.get((candidate.kind, candidate.id))
        if candidate.kind == "task":
            task = tasks[candidate.id]
            hits.append(
                SearchHit(
                    "task",
                    task["key"],
                    task["title"],
                    None,
                    None,
                    snippet(text, fallback=task["title"]),
                    candidate.rank,
                    candidate.id,
                )
            )
        else:
            note = notes[candidate.id]
            hits.append(
                SearchHit(
                    "note",
                    note["attempt__task__key"],
                    note["attempt__task__title"],
                    note["id"],
                    note["attempt_id"],
                    snippet(text, fallback=""),
                    candidate.rank,
                    candidate.id,
                )
            )
    return hits


# PostgreSQL: the two search indexes (migration leases 0025).
SEARCH_INDEXES = ("ledger_task_search", "leases_note_search")


def flush_pending_entries() -> int | None:
    """PostgreSQL: move the search indexes' pending entries into their trees (`gin_clean_pending_list`); the
    pages flushed. None on SQLite (FTS5 has no pending list).

    GIN takes new entries into a pending list (`fastupdate`, up to `gin_pending_list_limit`, 4 MB) that
    every scan of the index reads whole, and a search makes a scan per segment it walks: at 1M tasks a
    pending list of 240 pages (a measuring run's task updates: every non-HOT update of a task re-enters its
    vector) made the same searches 2-3x slower (docs/performance.md, "Search, round five"). Autovacuum
    flushes it only when it vacuums the table, after a fifth of a large table has changed. The sweep runs
    this every minute, so a search reads at most about a minute of writes there, and no writer pays for it.
    """
    if connection.vendor != "postgresql":
        return None
    try:
        # Only the indexes' owner (or a superuser) may flush them: a role that did not migrate gets an error,
        # which must not fail the sweep it runs in (the savepoint keeps the sweep's transaction usable).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(gin_clean_pending_list(name::regclass)), 0) FROM unnest(%s::text[]) AS name",
                [list(SEARCH_INDEXES)],
            )
            return int(cursor.fetchone()[0])
    except DatabaseError as exc:
        logger.warning("search indexes' pending entries not flushed: %s", exc)
        return 0


def search(
    *, query: str, agent: Agent | None, project: Project | None = None, offset: int = 0, limit: int = 20
) -> tuple[list[SearchHit], bool]:
    """Hits ranked best first (tasks before notes on a tie, then newer first), and whether more follow."""
    answer = search_answer(query=query, agent=agent, project=project, offset=offset, limit=limit)
    return answer.hits, answer.more


def search_answer(
    *, query: str, agent: Agent | None, project: Project | None = None, offset: int = 0, limit: int = 20
) -> SearchAnswer:
    """A page of hits ranked best first (tasks before notes on a tie, then newer first), each kind's
    RANK_WINDOW newest visible matches ranked; whether more follow and whether a window was ranked."""
    parsed = parse(query)
    if not parsed.finds_anything:
        return SearchAnswer([], more=False, windowed=False)
    tasks = tasks_visible_to(agent)
    notes = notes_visible_to(agent)
    if project is not None:
        tasks = tasks.filter(project=project)
        notes = notes.filter(attempt__task__project=project)
    projects = _caller_projects(agent, project)
    postgres = connection.vendor == "postgresql"
    with _bounded():
        if postgres:
            candidates, windowed = _postgres_candidates(query, projects)
        else:
            candidates, windowed = _sqlite_candidates(parsed, tasks, notes)
        page, more = _ranked_page(candidates, offset, limit)
        marked: dict[tuple[str, int], str] = {}
        for kind in ("task", "note"):
            ids = [c.id for c in page if c.kind == kind]
            if ids:
                found = _postgres_marked(query, kind, ids) if postgres else _sqlite_marked(parsed, kind, ids)
                marked.update({(kind, key): value for key, value in found.items()})
        hits = _hits(page, marked, projects)
    return SearchAnswer(hits, more=more, windowed=windowed)
