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

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import BooleanField, FloatField, QuerySet
from django.db.models.expressions import RawSQL

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
from ledger.selectors import tasks_visible_to

__all__ = ["SEARCHABLE_CHARS", "SNIPPET_MAX_CHARS", "SearchHit", "search", "websearch_text"]

SEARCHABLE_CHARS = 100_000  # PostgreSQL caps a tsvector at 1 MB; the triggers index this much of a description
TITLE_WEIGHT = 2.5  # SQLite's bm25 column weight of a title against a description (PostgreSQL: A 1.0, B 0.4)
SQLITE_PROGRESS_STEPS = 1000
# PostgreSQL's plan for a search is always the text index first, then primary-key lookups per match.
# A rare word's row estimate is a default (0.5 % of the table), which made the planner hash-join the
# visibility joins over every attempt and task and compile JIT code (0.2 ms of index work, 600 ms of
# plan at 1M tasks: docs/performance.md, "Search, indexed"). These hold for the search's statements only.
PLAN_SETTINGS = {
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "jit": "off",
}  # virtual-machine steps between two looks at the clock


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
        outer = connection.in_atomic_block
        settings_now = {**PLAN_SETTINGS, "statement_timeout": str(_timeout_ms())}
        with transaction.atomic():
            with connection.cursor() as cursor:
                names = list(settings_now)
                reads = ", ".join("current_setting(%s)" for _ in names)
                sets = ", ".join("set_config(%s, %s, true)" for _ in names)
                cursor.execute(
                    f"SELECT {reads}, {sets}",
                    [*names, *(value for name in names for value in (name, settings_now[name]))],
                )
                previous = dict(zip(names, cursor.fetchone()[: len(names)], strict=True))
            try:
                yield
            except OperationalError as exc:
                if "statement timeout" in str(exc):
                    raise _too_broad() from exc
                raise
            if outer:  # SET LOCAL would outlive the search in the caller's transaction
                with connection.cursor() as cursor:
                    for name, value in previous.items():
                        cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
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


def _postgres_candidates(query: str, tasks: QuerySet[Task], notes: QuerySet[Note], fetch: int) -> list[_Candidate]:
    text = websearch_text(query)
    found: list[_Candidate] = []
    for kind, table, scope in (("task", "ledger_task", tasks), ("note", "leases_note", notes)):
        # Table names are constants of this module; the query text is always a parameter.
        matches = RawSQL(f"{table}.search_vector @@ websearch_to_tsquery('english', %s)", [text], BooleanField())  # noqa: S611
        rank = RawSQL(f"ts_rank({table}.search_vector, websearch_to_tsquery('english', %s))", [text], FloatField())  # noqa: S611
        rows = scope.filter(matches).annotate(rank=rank).order_by("-rank", "-id").values_list("id", "rank")[:fetch]
        found += [_Candidate(kind, pk, float(value)) for pk, value in rows]
    return found


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
    parsed: ParsedQuery, tasks: QuerySet[Task], notes: QuerySet[Note], fetch: int
) -> list[_Candidate]:
    expression = fts5_expression(parsed)
    found: list[_Candidate] = []
    for kind, fts, weights, scope in (
        ("task", "ledger_task_fts", f"{TITLE_WEIGHT}, 1.0", tasks),
        ("note", "leases_note_fts", "1.0", notes),
    ):
        # The visible rows among the matches (the match drives, by rowid), then ranked by the match.
        match = f"SELECT rowid FROM {fts} WHERE {fts} MATCH %s"  # noqa: S608
        matching = scope.filter(id__in=RawSQL(match, [expression]))  # noqa: S611
        visible, params = matching.values("id").query.sql_with_params()
        sql = (
            f"SELECT rowid, -bm25({fts}, {weights}) AS rank FROM {fts} "  # noqa: S608
            f"WHERE {fts} MATCH %s AND +rowid IN ({visible}) ORDER BY rank DESC, rowid DESC LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [expression, *params, fetch])
            found += [_Candidate(kind, row[0], float(row[1])) for row in cursor.fetchall()]
    return found


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


def _hits(page: list[_Candidate], marked: dict[tuple[str, int], str]) -> list[SearchHit]:
    task_ids = [c.id for c in page if c.kind == "task"]
    note_ids = [c.id for c in page if c.kind == "note"]
    tasks = {row["id"]: row for row in Task.objects.filter(id__in=task_ids).values("id", "key", "title")}
    notes = {
        row["id"]: row
        for row in Note.objects.filter(id__in=note_ids).values(
            "id", "attempt_id", "attempt__task__key", "attempt__task__title"
        )
    }
    hits = []
    for candidate in page:
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


def search(
    *, query: str, agent: Agent | None, project: Project | None = None, offset: int = 0, limit: int = 20
) -> tuple[list[SearchHit], bool]:
    """Hits ranked best first (tasks before notes on a tie, then newer first), and whether more follow."""
    parsed = parse(query)
    if not parsed.finds_anything:
        return [], False
    tasks = tasks_visible_to(agent)
    notes = notes_visible_to(agent)
    if project is not None:
        tasks = tasks.filter(project=project)
        notes = notes.filter(attempt__task__project=project)
    fetch = offset + limit + 1
    postgres = connection.vendor == "postgresql"
    with _bounded():
        if postgres:
            candidates = _postgres_candidates(query, tasks, notes, fetch)
        else:
            candidates = _sqlite_candidates(parsed, tasks, notes, fetch)
        merged = sorted(candidates, key=lambda c: (-c.rank, c.kind != "task", -c.id))
        page = merged[offset : offset + limit]
        marked: dict[tuple[str, int], str] = {}
        for kind in ("task", "note"):
            ids = [c.id for c in page if c.kind == kind]
            if ids:
                found = _postgres_marked(query, kind, ids) if postgres else _sqlite_marked(parsed, kind, ids)
                marked.update({(kind, key): value for key, value in found.items()})
        hits = _hits(page, marked)
    return hits, len(merged) > offset + limit
