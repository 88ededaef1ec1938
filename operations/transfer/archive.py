"""An event archive file (SPEC §25): one closed month of the event log as JSON Lines, and reading it back.

Rows are the export's event rows (`rows.columns` of the `event` section: `task` by id, `actor_agent` by
handle, `actor_user` by username, `event_type`, values encoded as the export encodes them) plus the
event's own `id` and its `project` (an archive spans projects). The file:

    {"type": "header", "format": 1, "archive": "events", "month": "2026-01"}
    {"type": "event", "id": ..., "project": ..., "task": ..., ...}   (id order)
    {"type": "end", "counts": {"event": N}, "sha256": "<of the event lines, bytes as written>"}

`import_project FILE` recognises the header and restores the events with their own ids into a database
that holds the projects, tasks, agents and users they name (the database they were archived from, or a
restore of its backup): all or nothing, refusing an id already present; the webhook deliveries the insert
trigger queues for them are marked dead (history, not news). Restored rows of a month whose partition was
detached land in the default partition.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from core.errors import ValidationFailed
from ledger import clock
from ledger.models import Agent, Event, Project, Task
from operations.transfer.rows import AGENT, END, FORMAT_VERSION, HEADER, SECTION_BY_TYPE, USER, columns, decode, encode
from operations.transfer.untrusted import check_row, fail, parse_row, read_lines
from push.models import DeliveryStatus, WebhookDelivery

ARCHIVE_KIND = "events"
BATCH_ROWS = 500
SECTION = SECTION_BY_TYPE["event"]


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class RowSource:
    """Names for the ids an event row holds: agents by handle, users by username."""

    handles: dict[int, str]
    usernames: dict[int, str]


def row_source() -> RowSource:
    user_model = get_user_model()
    return RowSource(
        handles=dict(Agent.objects.values_list("id", "handle")),
        usernames=dict(user_model.objects.values_list("id", user_model.USERNAME_FIELD)),
    )


def _event_row(values: dict[str, Any], source: RowSource) -> dict[str, Any]:
    row: dict[str, Any] = {"type": "event", "id": values["id"], "project": values["project_id"]}
    for column in columns(SECTION):
        value = values[column.attname]
        if column.references == AGENT and value is not None:
            value = source.handles[value]
        elif column.references == USER and value is not None:
            value = source.usernames[value]
        row[column.name] = encode(value)
    return row


def archive_lines(
    *, month: date, rows: Iterable[dict[str, Any]], source: RowSource, body_only: bool = False
) -> Iterator[str]:
    """The file's lines (`body_only`: the event lines alone, as the checksum reads them)."""
    if not body_only:
        yield _line({"type": HEADER, "format": FORMAT_VERSION, "archive": ARCHIVE_KIND, "month": f"{month:%Y-%m}"})
    digest = hashlib.sha256()
    count = 0
    for values in rows:
        line = _line(_event_row(values, source))
        digest.update(line.encode("utf-8"))
        count += 1
        yield line
    if not body_only:
        yield _line({"type": END, "counts": {"event": count}, "sha256": digest.hexdigest()})


def is_archive_header(text: str) -> bool:
    try:
        row = json.loads(text)
    except ValueError:
        return False
    return isinstance(row, dict) and row.get("type") == HEADER and row.get("archive") == ARCHIVE_KIND


def _header(line: int, text: str) -> None:
    row = parse_row(line, text)
    if not is_archive_header(text) or set(row) != {"type", "format", "archive", "month"}:
        raise fail(line, "not an event archive header")
    if not isinstance(row["format"], int) or row["format"] > FORMAT_VERSION:
        raise fail(line, f"format {row['format']!r} is not one this server reads (format {FORMAT_VERSION})")


def _end(line: int, row: dict[str, Any], count: int, sha256: str) -> None:
    if set(row) != {"type", "counts", "sha256"} or row["counts"] != {"event": count} or row["sha256"] != sha256:
        raise fail(line, f"the end row does not match the {count} event rows read (count or sha256 differs)")


def file_digest(path: Path) -> tuple[int, str]:
    """(rows, sha256) of an archive file's event lines, after checking its header and its end row."""
    digest = hashlib.sha256()
    count = 0
    ended = False
    with path.open("rb") as stream:
        for number, text in enumerate(read_lines(stream), start=1):
            if number == 1:
                _header(number, text)
                continue
            row = parse_row(number, text)
            if ended:
                raise fail(number, "a row after the end row")
            if row["type"] == END:
                _end(number, row, count, digest.hexdigest())
                ended = True
            else:
                digest.update(text.encode("utf-8"))
                count += 1
    if not ended:
        raise fail(count + 1, "the file ends without its end row: it is truncated")
    return count, digest.hexdigest()


class _Restorer:
    def __init__(self) -> None:
        user_model = get_user_model()
        self.agents = dict(Agent.objects.values_list("handle", "id"))
        self.users = dict(user_model.objects.values_list(user_model.USERNAME_FIELD, "id"))
        self.pending: list[tuple[int, Event]] = []
        self.digest = hashlib.sha256()
        self.count = 0
        self.last_id = 0
        self.now = clock.now()

    def row(self, line: int, text: str, row: dict[str, Any]) -> None:
        if row["type"] != "event":
            raise fail(line, f"an event archive holds event rows, not {str(row['type'])[:40]!r}")
        cols = columns(SECTION)
        expected = {"type", "id", "project", *(column.name for column in cols)}
        if set(row) != expected:
            raise fail(line, f"an event row holds exactly {', '.join(sorted(expected))}")
        event_id = row["id"]
        if not isinstance(event_id, int) or isinstance(event_id, bool) or event_id <= self.last_id:
            raise fail(line, "event ids must be integers that increase: the file is out of order")
        values: dict[str, Any] = {"id": event_id, "project_id": self._id(line, "project", row["project"])}
        for column in cols:
            raw = row[column.name]
            if raw is None or not column.references or column.attname == "attempt_id":
                try:
                    values[column.attname] = decode(column.field, raw)
                except ValueError as exc:
                    raise fail(line, f"{column.name}: {exc}") from None
            elif column.references == AGENT:
                values[column.attname] = self._named(line, self.agents, "agent", raw)
            elif column.references == USER:
                values[column.attname] = self._named(line, self.users, "user", raw)
            else:
                values[column.attname] = self._id(line, column.name, raw)
        event = Event(**values)
        check_row(line, SECTION, event, values, now=self.now)
        self.digest.update(text.encode("utf-8"))
        self.count += 1
        self.last_id = event_id
        self.pending.append((line, event))
        if len(self.pending) >= BATCH_ROWS:
            self.flush()

    @staticmethod
    def _named(line: int, ids: dict[str, int], kind: str, name: Any) -> int:
        if not isinstance(name, str) or name not in ids:
            raise fail(line, f"{kind} {str(name)[:100]!r} is not in this database")
        return ids[name]

    @staticmethod
    def _id(line: int, name: str, value: Any) -> int | None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise fail(line, f"{name}: expected an id")
        return value

    def flush(self) -> None:
        if not self.pending:
            return
        first_line = self.pending[0][0]
        events = [event for _, event in self.pending]
        ids = [event.pk for event in events]
        present = sorted(Event.objects.filter(pk__in=ids).values_list("pk", flat=True))
        if present:
            raise fail(first_line, f"event {present[0]} is already in the table: nothing restored")
        references: tuple[tuple[str, type[Project] | type[Task], set[int]], ...] = (
            ("project", Project, {e.project_id for e in events if e.project_id is not None}),
            ("task", Task, {e.task_id for e in events if e.task_id is not None}),
        )
        for name, model, wanted in references:
            found = set(model._default_manager.filter(pk__in=wanted).values_list("pk", flat=True))
            if wanted - found:
                raise fail(first_line, f"{name} {min(wanted - found)} is not in this database: nothing restored")
        Event.objects.bulk_create(events)
        WebhookDelivery.objects.filter(event_id__in=ids, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.DEAD, last_error="restored archive: not delivered"
        )
        self.pending = []


def events_restore(*, lines: Iterable[str]) -> int:
    """Restore an event archive's rows with their own ids, all or nothing; returns how many."""
    restorer: _Restorer | None = None
    ended = False
    number = 0
    with transaction.atomic():
        for number, text in enumerate(lines, start=1):
            if number == 1:
                _header(number, text)
                restorer = _Restorer()
                continue
            assert restorer is not None
            row = parse_row(number, text)
            if ended:
                raise fail(number, "a row after the end row")
            if row["type"] == END:
                restorer.flush()
                _end(number, row, restorer.count, restorer.digest.hexdigest())
                ended = True
            else:
                restorer.row(number, text, row)
        if restorer is None:
            raise fail(1, "the file is empty")
        if not ended:
            raise fail(number, "the file ends without its end row: it is truncated")
    return restorer.count


__all__ = ["ValidationFailed", "archive_lines", "events_restore", "file_digest", "is_archive_header", "row_source"]
