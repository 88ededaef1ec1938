"""Ended attempts, read in chunks by key (SPEC §25): never the whole lookback window at once.

Each reader yields `EndedChunk`s of at most `ENDED_CHUNK` attempts, and says
which findings the chunk judges (`settles`): the findings of the ended-attempt
conditions whose subject it covers, resolved when the chunk no longer
observes them. Every query is served by an index: ids (the primary key),
`finished_at` (`attempt_finished_cover`), `branch` (`attempt_branch`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from django.db.models import Q, QuerySet

from leases.models import Attempt, AttemptStatus
from leases.selectors import INHERITING_STATUSES
from ledger.models import TaskStatus
from reconciliation.models import ENDED_ATTEMPT_CONDITIONS, UNRESOLVED_FINDING_STATUSES, Finding, FindingStatus
from reconciliation.snapshot import BRANCH_CHUNK, EndedAttempt, attempt_branch, chunks

# How long after an attempt ended reconciliation still checks its branch.
ENDED_LOOKBACK = timedelta(days=30)
# Attempts per chunk: one read, one git pass and one short write transaction each.
ENDED_CHUNK = 500
# Completed attempts (is their branch still there?) and ended ones a claim may inherit from.
ENDED_STATUSES: tuple[str, ...] = (AttemptStatus.COMPLETED, *INHERITING_STATUSES)
_COLUMNS = (
    "id",
    "task_id",
    "task__key",
    "task__status",
    "task__project_id",
    "agent__handle",
    "status",
    "branch",
    "label",
    "base_commit",
    "head_commit",
    "commits_ahead",
    "seen_commits_ahead",
    "finished_at",
    "task__landed_commit",
)


@dataclass(frozen=True)
class EndedChunk:
    attempts: list[EndedAttempt]
    # The findings of ENDED_ATTEMPT_CONDITIONS this chunk judges: those of its subjects.
    settles: Q
    # For the full scan's chunks: the cursor to commit with the chunk's findings.
    scan_after_id: int | None = None


def _ended(now: datetime) -> QuerySet[Attempt]:
    """The lookback window, on the attempt table alone (no join: the planner keeps to its indexes)."""
    return Attempt.objects.filter(status__in=ENDED_STATUSES, finished_at__gte=now - ENDED_LOOKBACK)


def _window(project_id: int, now: datetime) -> QuerySet[Attempt]:
    return _ended(now).filter(task__project_id=project_id)


def _read(queryset: QuerySet[Attempt]) -> list[EndedAttempt]:
    return [
        EndedAttempt(
            id=row["id"],
            task_id=row["task_id"],
            task_key=row["task__key"],
            task_status=row["task__status"],
            project_id=row["task__project_id"],
            agent_handle=row["agent__handle"],
            status=row["status"],
            branch=attempt_branch(row["branch"], row["label"]),
            base_commit=row["base_commit"],
            head_commit=row["head_commit"],
            commits_ahead=row["commits_ahead"],
            seen_commits_ahead=row["seen_commits_ahead"],
            # Never null: a terminal attempt always has it (a CHECK constraint).
            finished_at=cast(datetime, row["finished_at"]),
            task_landed=row["task__status"] == TaskStatus.DONE and bool(row["task__landed_commit"]),
        )
        for row in queryset.values(*_COLUMNS)
    ]


def _by_index(project_id: int, now: datetime, queryset: QuerySet[Attempt]) -> Iterator[EndedChunk]:
    """The project's attempts among `queryset` (bounded by what changed), `ENDED_CHUNK` at a time.

    Their ids are read first, unordered and without the join to the task, so the planner starts
    from the selective index (`finished_at`, `branch`): ordered by id with a limit, or joined to
    the project's tasks, SQLite walks every attempt ever made instead. Then each chunk is read by
    primary key, the project's only.
    """
    yield from by_ids(project_id, now=now, ids=set(queryset.order_by().values_list("id", flat=True)))


def scan(project_id: int, *, now: datetime, after_id: int) -> Iterator[EndedChunk]:
    """The whole lookback window from `after_id` on; each chunk settles every attempt id up to its last one
    (so the findings of attempts that left the window resolve), the final chunk every id beyond."""
    last = after_id
    while True:
        attempts = _read(_window(project_id, now).filter(id__gt=last).order_by("id")[:ENDED_CHUNK])
        if len(attempts) < ENDED_CHUNK:
            yield EndedChunk(attempts, Q(attempt_id__gt=last), scan_after_id=None)
            return
        yield EndedChunk(
            attempts, Q(attempt_id__gt=last, attempt_id__lte=attempts[-1].id), scan_after_id=attempts[-1].id
        )
        last = attempts[-1].id


def ended_since(project_id: int, *, now: datetime, since: datetime) -> Iterator[EndedChunk]:
    """The attempts that ended at or after `since` (bounded by the work done since the last run)."""
    return _by_index(project_id, now, _ended(now).filter(finished_at__gte=since))


def on_branches(project_id: int, *, now: datetime, branches: Collection[str]) -> Iterator[EndedChunk]:
    """The attempts of the lookback window that named one of `branches`."""
    for names in chunks(sorted(branches), BRANCH_CHUNK):
        yield from _by_index(project_id, now, _ended(now).filter(branch__in=names))


def by_ids(project_id: int, *, now: datetime, ids: Collection[int]) -> Iterator[EndedChunk]:
    """These attempts, judged again; one that left the window (or is no longer ended) settles its findings."""
    for chunk in chunks(sorted(ids), ENDED_CHUNK):
        yield EndedChunk(_read(_window(project_id, now).filter(id__in=chunk)), Q(attempt_id__in=list(chunk)))


def finding_subjects(project_id: int, *, since: datetime) -> set[int]:
    """The attempts of the project's ended-attempt findings that are unresolved, or were resolved since
    `since` (one resolved by hand while its condition holds is opened again): bounded by findings."""
    findings = Finding.objects.filter(
        Q(status__in=UNRESOLVED_FINDING_STATUSES) | Q(status=FindingStatus.RESOLVED, resolved_at__gte=since),
        project_id=project_id,
        condition__in=ENDED_ATTEMPT_CONDITIONS,
        attempt_id__isnull=False,
    )
    return set(findings.values_list("attempt_id", flat=True))
