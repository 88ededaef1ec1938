"""Streamed CSV exports for managers: tasks, attempts (and the events CSV's cell rules, shared).

Every export is a `StreamingHttpResponse` over `QuerySet.iterator(chunk_size)`:
rows are read a chunk at a time (a server-side cursor on PostgreSQL) and
written a line at a time, so 100,000 rows stream in bounded memory
(`tests/console/test_exports.py` measures it with tracemalloc). A cell a
spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR) is prefixed
with `'`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.http import StreamingHttpResponse

from leases.models import Attempt, AttemptStatus
from leases.selectors import with_lease_state
from ledger import clock
from ledger.models import Task

CSV_CHUNK = 2000
# Cells a spreadsheet would run as a formula.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


class Echo:
    """A file-like object whose write returns the line, for csv.writer in a generator."""

    def write(self, value: str) -> str:
        return value


def csv_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def iso(value: datetime | None) -> str:
    return clock.iso(value) or "" if value is not None else ""


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    writer = csv.writer(Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([csv_cell(cell) for cell in row])


def csv_download(lines: Iterator[str], *, name: str) -> StreamingHttpResponse:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="leasehold-{name}-{stamp}.csv"'
    response["Cache-Control"] = "no-store"
    return response


TASK_COLUMNS = (
    "key",
    "project",
    "title",
    "status",
    "effective_status",
    "holder",
    "priority",
    "task_class",
    "labels",
    "reserved_for",
    "blocked_reason",
    "last_attempt_status",
    "last_failure_reason",
    "last_result_summary",
    "created_at",
    "updated_at",
    "ready_since",
)


def task_rows(tasks: QuerySet[Task], *, now: datetime) -> Iterator[list[Any]]:
    latest = Attempt.objects.filter(task=OuterRef("pk")).exclude(status=AttemptStatus.ACTIVE).order_by("-id")
    annotated = (
        with_lease_state(tasks, now=now)
        .select_related("project", "reserved_for")
        .annotate(
            last_status=Subquery(latest.values("status")[:1]),
            last_reason=Subquery(latest.values("failure_reason_code")[:1]),
            last_summary=Subquery(latest.values("result_summary")[:1]),
        )
    )
    for task in annotated.iterator(chunk_size=CSV_CHUNK):
        yield [
            task.key,
            task.project.slug,
            task.title,
            task.status,
            getattr(task, "effective_status", ""),
            getattr(task, "holder_handle", "") or "",
            task.priority,
            task.task_class,
            ",".join(map(str, task.labels or [])),
            task.reserved_for.handle if task.reserved_for else "",
            task.blocked_reason,
            getattr(task, "last_status", "") or "",
            getattr(task, "last_reason", "") or "",
            getattr(task, "last_summary", "") or "",
            iso(task.created_at),
            iso(task.updated_at),
            iso(task.ready_since),
        ]


ATTEMPT_COLUMNS = (
    "id",
    "task",
    "task_title",
    "project",
    "agent",
    "epoch",
    "status",
    "claimed_at",
    "finished_at",
    "lease_seconds",
    "renew_count",
    "branch",
    "failure_reason",
    "interruption_reason",
    "revoked_by",
    "revoke_reason",
    "result_summary",
    "next_steps",
)


def attempt_rows(attempts: QuerySet[Attempt]) -> Iterator[list[Any]]:
    for attempt in attempts.select_related("task__project", "agent").iterator(chunk_size=CSV_CHUNK):
        yield [
            attempt.pk,
            attempt.task.key,
            attempt.task.title,
            attempt.task.project.slug,
            attempt.agent.handle,
            attempt.epoch,
            attempt.status,
            iso(attempt.claimed_at),
            iso(attempt.finished_at),
            attempt.lease_seconds,
            attempt.renew_count,
            attempt.branch,
            attempt.failure_reason_code,
            attempt.interruption_reason_code,
            attempt.revoked_by,
            attempt.revoke_reason,
            attempt.result_summary,
            " | ".join(map(str, attempt.next_steps or [])),
        ]
