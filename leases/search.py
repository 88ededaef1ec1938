"""Search over task titles and descriptions and note contents, scoped to the caller's projects.

PostgreSQL: full-text search (`websearch_to_tsquery`, English configuration),
ranked with `ts_rank`, snippets from `ts_headline` with matches in `**bold**`.
No GIN index is assumed: the vectors are computed per query, which is fine
at the scale of one installation; an expression index can be added later
without changing this code. Only the first SEARCHABLE_CHARS characters of a
text are searched (PostgreSQL caps a tsvector at 1 MB).

SQLite: a portable fallback — every word of the query must occur
(case-insensitive for ASCII, as SQLite's LIKE), title matches rank first,
the snippet is cut around the first occurrence.

Either way a snippet is at most SNIPPET_MAX_CHARS characters, never a body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Case, FloatField, Q, QuerySet, Value, When
from django.db.models.functions import Greatest, Lower, StrIndex, Substr

from leases.models import Note
from leases.selectors import notes_visible_to
from ledger.models import Agent, Project, Task
from ledger.selectors import tasks_visible_to

SNIPPET_MAX_CHARS = 300
SEARCHABLE_CHARS = 100_000
MAX_TERMS = 10
CONTEXT_BEFORE = 80
ELLIPSIS = "…"


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


def _clean_snippet(text: str | None, *, cut_before: bool, fallback: str) -> str:
    text = re.sub(r"\s+", " ", text or "").strip() or fallback
    prefix = ELLIPSIS if cut_before else ""
    room = SNIPPET_MAX_CHARS - len(prefix)
    if len(text) > room:
        text = text[: room - 1].rstrip() + ELLIPSIS
    return prefix + text


def _postgres_hits(
    query: str, tasks: QuerySet[Task], notes: QuerySet[Note], fetch: int
) -> tuple[list[SearchHit], list[SearchHit]]:
    from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank, SearchVector

    ts_query = SearchQuery(query, search_type="websearch", config="english")
    headline: dict[str, Any] = {
        "config": "english",
        "start_sel": "**",
        "stop_sel": "**",
        "max_words": 35,
        "min_words": 15,
        "max_fragments": 1,
    }
    description = Substr("description", 1, SEARCHABLE_CHARS)
    task_vector = SearchVector("title", weight="A", config="english") + SearchVector(
        description, weight="B", config="english"
    )
    task_rows = (
        tasks.annotate(document=task_vector)
        .filter(document=ts_query)
        .annotate(rank=SearchRank(task_vector, ts_query), snippet=SearchHeadline(description, ts_query, **headline))
        .order_by("-rank", "-id")
        .values("id", "key", "title", "rank", "snippet")[:fetch]
    )
    content = Substr("content", 1, SEARCHABLE_CHARS)
    note_vector = SearchVector(content, config="english")
    note_rows = (
        notes.annotate(document=note_vector)
        .filter(document=ts_query)
        .annotate(rank=SearchRank(note_vector, ts_query), snippet=SearchHeadline(content, ts_query, **headline))
        .order_by("-rank", "-id")
        .values("id", "attempt_id", "attempt__task__key", "attempt__task__title", "rank", "snippet")[:fetch]
    )
    return (
        [
            SearchHit(
                "task",
                row["key"],
                row["title"],
                None,
                None,
                _clean_snippet(row["snippet"], cut_before=False, fallback=row["title"]),
                float(row["rank"]),
                row["id"],
            )
            for row in task_rows
        ],
        [
            SearchHit(
                "note",
                row["attempt__task__key"],
                row["attempt__task__title"],
                row["id"],
                row["attempt_id"],
                _clean_snippet(row["snippet"], cut_before=False, fallback=""),
                float(row["rank"]),
                row["id"],
            )
            for row in note_rows
        ],
    )


def _window(field: str, term: str) -> dict[str, Any]:
    """Annotations: where `term` first occurs in `field`, and the text around it."""
    position = StrIndex(Lower(field), Lower(Value(term)))
    start = Greatest(position - CONTEXT_BEFORE, Value(1))
    return {"position": position, "excerpt": Substr(field, start, SNIPPET_MAX_CHARS)}


def _portable_hits(
    query: str, tasks: QuerySet[Task], notes: QuerySet[Note], fetch: int
) -> tuple[list[SearchHit], list[SearchHit]]:
    terms = query.split()[:MAX_TERMS]
    for term in terms:
        tasks = tasks.filter(Q(title__icontains=term) | Q(description__icontains=term))
        notes = notes.filter(content__icontains=term)
    first = terms[0]
    task_rows = (
        tasks.annotate(
            rank=Case(When(title__icontains=first, then=Value(1.0)), default=Value(0.5), output_field=FloatField())
        )
        .annotate(**_window("description", first))
        .order_by("-rank", "-id")
        .values("id", "key", "title", "rank", "position", "excerpt")[:fetch]
    )
    note_rows = (
        notes.annotate(rank=Value(0.5, output_field=FloatField()))
        .annotate(**_window("content", first))
        .order_by("-id")
        .values("id", "attempt_id", "attempt__task__key", "attempt__task__title", "rank", "position", "excerpt")[:fetch]
    )
    return (
        [
            SearchHit(
                "task",
                row["key"],
                row["title"],
                None,
                None,
                _clean_snippet(row["excerpt"], cut_before=row["position"] > CONTEXT_BEFORE + 1, fallback=row["title"]),
                row["rank"],
                row["id"],
            )
            for row in task_rows
        ],
        [
            SearchHit(
                "note",
                row["attempt__task__key"],
                row["attempt__task__title"],
                row["id"],
                row["attempt_id"],
                _clean_snippet(row["excerpt"], cut_before=row["position"] > CONTEXT_BEFORE + 1, fallback=""),
                row["rank"],
                row["id"],
            )
            for row in note_rows
        ],
    )


def search(
    *, query: str, agent: Agent | None, project: Project | None = None, offset: int = 0, limit: int = 20
) -> tuple[list[SearchHit], bool]:
    """Hits ranked best first (tasks before notes on a tie), and whether more follow."""
    tasks = tasks_visible_to(agent)
    notes = notes_visible_to(agent)
    if project is not None:
        tasks = tasks.filter(project=project)
        notes = notes.filter(attempt__task__project=project)
    fetch = offset + limit + 1
    finder = _postgres_hits if connection.vendor == "postgresql" else _portable_hits
    task_hits, note_hits = finder(query, tasks, notes, fetch)
    merged = sorted([*task_hits, *note_hits], key=lambda hit: (-hit.rank, hit.kind != "task", -hit.order))
    page = merged[offset : offset + limit]
    return page, len(merged) > offset + limit
