"""The ended attempts of one project, read only where something changed since the last run (SPEC §25).

Ended attempts are history: a fleet ends thousands a day, and reading the
whole lookback window every five minutes made a run cost 21 to 153 s and
2.6 GB at a million tasks. A project's `ReconcileCursor` holds the clock
reading of its last finished pass (`watermark_at`) and the branch tips that
pass saw (`heads`); a run re-reads only

- the attempts that ended since the watermark (less the completed-branch
  grace, so an attempt is judged once its grace is over),
- the attempts of every branch whose tip moved, appeared or went away,
- the subjects of the project's ended-attempt findings that are unresolved,
  or were resolved since the watermark (so they resolve, or open again),
- when a live exclusive reservation was claimed since the watermark, the
  attempts of the branches the repository has (whose changes may now fall
  inside it),

and a project without a cursor (its first run, or `reconcile --full`) is
scanned whole, by attempt id, `ENDED_CHUNK` at a time. Each chunk's
findings, the commits seen on its branches and the scan's progress commit in
one short transaction, so an interrupted scan resumes where it stopped.
What an incremental run cannot see: a rewrite of the default branch that
un-merges work, a task that stops being landed, or a reservation that now
covers a deleted branch's reported head. `reconcile --full` re-reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Q

from leases.selectors import live_reservations
from ledger.models import PathsMode, Project
from reconciliation import ended, git_conditions
from reconciliation.ended import EndedChunk
from reconciliation.git_conditions import COMPLETED_BRANCH_GRACE, LiveReservation, RepositoryView
from reconciliation.models import ENDED_ATTEMPT_CONDITIONS, ReconcileCursor
from reconciliation.recording import Tally, write_chunk


def head_marks(view: RepositoryView) -> dict[str, str]:
    """Each branch's tips here and on the remote, as one comparable string."""
    remote = view.remote_heads or {}
    return {branch: f"{view.heads.get(branch, '')}|{remote.get(branch, '')}" for branch in {*view.heads, *remote}}


def _moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {branch for branch in {*before, *after} if before.get(branch) != after.get(branch)}


def _save_cursor(project_id: int, *, now: datetime, **fields: object) -> None:
    ReconcileCursor.objects.update_or_create(project_id=project_id, defaults={**fields, "updated_at": now})


def live_exclusive_reservations(project_id: int, now: datetime) -> list[LiveReservation]:
    rows = (
        live_reservations(project=Project(pk=project_id), now=now)
        .filter(mode=PathsMode.EXCLUSIVE)
        .values_list("attempt_id", "attempt__task_id", "attempt__task__key", "paths")
    )
    return [LiveReservation(*row) for row in rows]


def _changed_chunks(
    view: RepositoryView, cursor: ReconcileCursor, marks: dict[str, str], *, now: datetime
) -> Iterator[EndedChunk]:
    project_id = view.project.id
    since = cursor.watermark_at
    yield from ended.ended_since(project_id, now=now, since=since - COMPLETED_BRANCH_GRACE)
    yield from ended.on_branches(project_id, now=now, branches=_moved(cursor.heads or {}, marks))
    yield from ended.by_ids(project_id, now=now, ids=ended.finding_subjects(project_id, since=since))
    claimed_since = (
        live_reservations(project=Project(pk=project_id), now=now)
        .filter(mode=PathsMode.EXCLUSIVE, attempt__claimed_at__gte=since)
        .exists()
    )
    if claimed_since:
        yield from ended.on_branches(project_id, now=now, branches=set(marks))


def reconcile_ended(view: RepositoryView, *, run_id: int, now: datetime, full: bool, tally: Tally) -> None:
    """Judge the project's ended attempts that changed (all of them on a first or `full` run), a chunk at a time."""
    project_id = view.project.id
    marks = head_marks(view)
    cursor = None if full else ReconcileCursor.objects.filter(project_id=project_id).first()
    passes: list[Iterator[EndedChunk]] = []
    if cursor is None:
        # A fresh scan: its start is the watermark, so what ends while it runs (or after it stopped) is read next time.
        write_chunk(
            run_id=run_id,
            observations=[],
            now=now,
            also=lambda: _save_cursor(project_id, now=now, watermark_at=now, heads=marks, scan_after_id=0),
        )
        passes.append(ended.scan(project_id, now=now, after_id=0))
    else:
        passes.append(_changed_chunks(view, cursor, marks, now=now))
        if cursor.scan_after_id is not None:  # a scan that stopped midway
            passes.append(ended.scan(project_id, now=now, after_id=cursor.scan_after_id))
    reservations = live_exclusive_reservations(project_id, now)
    for chunks in passes:
        for chunk in chunks:
            _judge(view, chunk, reservations, run_id=run_id, now=now, tally=tally)
    # A large repository's tips are rewritten only when they moved.
    heads = {} if cursor is not None and cursor.heads == marks else {"heads": marks}
    write_chunk(
        run_id=run_id,
        observations=[],
        now=now,
        also=lambda: _save_cursor(project_id, now=now, watermark_at=now, scan_after_id=None, **heads),
    )


def _judge(
    view: RepositoryView,
    chunk: EndedChunk,
    reservations: list[LiveReservation],
    *,
    run_id: int,
    now: datetime,
    tally: Tally,
) -> None:
    """Git for one chunk with no transaction open, then its findings in one short transaction."""
    observations = [
        *git_conditions.completed_branch_missing(view, chunk.attempts, now=now),
        *git_conditions.unreserved_change(view, chunk.attempts, reservations),
    ]
    seen = git_conditions.work_seen(view, chunk.attempts)
    project_id, scan_after_id = view.project.id, chunk.scan_after_id
    written = write_chunk(
        run_id=run_id,
        observations=observations,
        now=now,
        settles=chunk.settles & _of_project(project_id),
        work_seen=seen,
        also=(
            (lambda: _save_cursor(project_id, now=now, scan_after_id=scan_after_id))
            if scan_after_id is not None
            else None
        ),
    )
    tally.opened += written.opened
    tally.resolved += written.resolved
    tally.observed.update(observation.key for observation in observations)


def _of_project(project_id: int) -> Q:
    return Q(project_id=project_id, condition__in=ENDED_ATTEMPT_CONDITIONS)
