"""Read a project export back into a new project (SPEC §17), all or nothing.

The file is read line by line inside one transaction; rows are inserted in
batches with `bulk_create` (plain INSERTs, which the event table's triggers
allow), and every problem raises `ValidationFailed` naming the line, which
rolls back everything written so far: a failed import leaves no project. A
dry run does all of it and rolls back at the end.

What is kept: keys (unless `key_prefix` renames them), numbers, epochs,
versions, statuses, timestamps, and the events' order (new ids, in the same
relative order). What changes: every id (references are remapped, and so are
the ids that event payloads name, `rows.PAYLOAD_REFERENCES`); an attempt's
`event_id_at_claim` points at the same place in the imported events; lease
tokens get fresh random hashes nobody holds, so an attempt that was live
stays active until its lease lapses and the sweep expires it. A task's
blocker of another project (`external_dependency` rows, SPEC §22) is read,
checked and counted but not linked: the imported task does not wait for it.
Imported events
are history: the webhook deliveries the insert trigger queues for them are
marked dead, not posted.

Memory holds one id pair per imported task, attempt, note and the other
referenced rows, never the events or any text.

An export file is a trust boundary (issue 27, L3/L4): it may have been
written by anyone. Every row goes through the model's field validation
(`full_clean`: lengths, choices, blanks) and the rules the API applies to
the same values: event types must be `EventType`s, git facts pass
`leases.services.git_facts` (a commit is 40 hex characters, a branch a
Conventional Branch name, a worktree path absolute), integers fit their
columns (an epoch < 2^31), a lease ends no later than the longest lease
from now. A line holds at most 1 MB and JSON nests at most 64 deep; the
file is read line by line with that bound (`read_lines`), so `/dev/zero`
fails at once. The project's `repository` and `remote` pass the admin's
rules, a remote's host the webhooks' address policy, and a local
repository (a path or `file://`) is taken only when the operator says so
(`import_project --allow-repository`).
"""

from __future__ import annotations

import re
import secrets
from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError, models, transaction
from django.db.models import Max

from core.errors import LedgerError
from leases.models import Attempt
from ledger import clock
from ledger.models import Agent, Decision, DecisionStatus, Event, Project
from ledger.services.projects import (
    validate_default_branch,
)
from ledger.tokens import hash_token, new_agent_token
from operations.transfer.rows import (
    AGENT,
    END,
    EVENT_ID_COLUMNS,
    EXTERNAL_DEPENDENCY,
    EXTERNAL_DEPENDENCY_FIELDS,
    FORMAT_VERSION,
    HEADER,
    ORDER,
    SECTION_BY_TYPE,
    USER,
    Column,
    Section,
    columns,
    decode,
    has_own_id,
    payload_references,
)
from operations.transfer.untrusted import check_row, fail, git_location, parse_row
from push.models import DeliveryStatus, WebhookDelivery

BATCH_ROWS = 500
KEY_PREFIX = re.compile(r"^[A-Z][A-Z0-9]{0,9}$")


@dataclass
class ImportResult:
    slug: str
    key_prefix: str
    counts: dict[str, int]
    dry_run: bool


class _Rollback(Exception):
    """Raised at the end of a dry run so the transaction rolls everything back."""


@dataclass
class _Importer:
    slug: str | None
    key_prefix: str | None
    now: Any
    allow_repository: bool = False
    ids: dict[str, dict[int, int]] = field(default_factory=dict)
    handles: dict[str, int] = field(default_factory=dict)
    usernames: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    project: Project | None = None
    rank: int = -1
    pending: list[tuple[models.Model, int | None]] = field(default_factory=list)
    pending_type: str = ""
    supersessions: list[tuple[int, int, int, str]] = field(default_factory=list)  # line, decision, by, status
    claims: list[tuple[int, int]] = field(default_factory=list)  # (event id at claim, attempt), sorted
    claim_events: dict[int, Event | None] = field(default_factory=dict)
    last_event: Event | None = None
    last_event_source: int = 0
    events_before: int = 0
    columns_by_type: dict[str, list[Column]] = field(default_factory=dict)

    # --- rows -----------------------------------------------------------------

    def header(self, line: int, row: dict[str, Any]) -> None:
        if row.get("type") != HEADER:
            raise fail(line, "the first row must be the header row (type 'header'); is this a Leasehold export?")
        version = row.get("format")
        if not isinstance(version, int) or isinstance(version, bool):
            raise fail(line, "the header's format must be an integer")
        if version > FORMAT_VERSION:
            raise fail(line, f"format {version} is newer than this server reads (format {FORMAT_VERSION})")
        if set(row) != {"type", "format"}:
            raise fail(line, f"unknown header field(s): {', '.join(sorted(set(row) - {'type', 'format'}))}")

    def row(self, line: int, row: dict[str, Any]) -> None:
        kind = row.get("type")
        if not isinstance(kind, str) or kind not in ORDER:
            raise fail(line, f"unknown row type {kind!r}")
        rank = ORDER.index(kind)
        if rank < self.rank:
            raise fail(line, f"a {kind} row after {ORDER[self.rank]} rows: the file is out of order")
        if kind != "project" and self.project is None:
            raise fail(line, f"a {kind} row before the project row: the file is out of order")
        if kind != self.pending_type:
            self.flush(line)
        self.rank = rank
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == USER:
            self.user(line, row)
        elif kind == AGENT:
            self.agent(line, row)
        elif kind == "project":
            self.create_project(line, row)
        elif kind == EXTERNAL_DEPENDENCY:
            self.external_dependency(line, row)
        else:
            self.queue(line, SECTION_BY_TYPE[kind], row)

    def _expect(self, line: int, row: dict[str, Any], expected: set[str]) -> None:
        unknown, missing = set(row) - expected, expected - set(row)
        if unknown:
            raise fail(line, f"unknown field(s) of a {row['type']} row: {', '.join(sorted(unknown))}")
        if missing:
            raise fail(line, f"a {row['type']} row without its field(s): {', '.join(sorted(missing))}")

    def external_dependency(self, line: int, row: dict[str, Any]) -> None:
        """A blocker of another project (SPEC §22), by key: checked, counted and not linked. The key names a
        task of the exporting server; here it may name nothing, or an unrelated task, so the imported task
        does not wait for it (an operator adds the dependency again if the other project is here too)."""
        self._expect(line, row, set(EXTERNAL_DEPENDENCY_FIELDS))
        task = row["task"]
        if not isinstance(task, int) or isinstance(task, bool) or task not in self.ids.get("task", {}):
            raise fail(line, f"task references task {task!r}, which no earlier row defines")
        if not isinstance(row["blocked_by_key"], str) or not 1 <= len(row["blocked_by_key"]) <= 24:
            raise fail(line, "blocked_by_key: expected a task key")

    def user(self, line: int, row: dict[str, Any]) -> None:
        self._expect(line, row, {"type", "username"})
        username = row["username"]
        if not isinstance(username, str) or not username:
            raise fail(line, "username must be a non-empty string")
        user_model = get_user_model()
        try:
            username_field = cast("models.Field[Any, Any]", user_model._meta.get_field(user_model.USERNAME_FIELD))
            username_field.clean(username, None)
        except ValidationError as exc:
            raise fail(line, f"not a valid username: {exc.messages}") from None
        user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
        if user is None:
            user = user_model(**{user_model.USERNAME_FIELD: username, "is_active": False})
            user.set_unusable_password()
            user.save()
        self.usernames[username] = user.pk

    def agent(self, line: int, row: dict[str, Any]) -> None:
        self._expect(line, row, {"type", "handle", "kind", "created_at", "member"})
        handle = row["handle"]
        if not isinstance(handle, str):
            raise fail(line, "handle must be a string")
        agent = Agent.objects.filter(handle=handle).first()
        if agent is None:
            try:
                created_at = decode(Agent._meta.get_field("created_at"), row["created_at"])
            except ValueError as exc:
                raise fail(line, f"created_at: {exc}") from None
            agent = Agent(
                handle=handle,
                kind=row["kind"],
                token_hash=hash_token(new_agent_token()),  # nobody holds this token: the agent is inactive
                is_active=False,
                created_at=created_at,
                deactivated_at=self.now,
            )
            try:
                agent.full_clean(exclude=["token_hash"])
            except ValidationError as exc:
                raise fail(line, f"not a valid agent: {exc.messages}") from None
            agent.save()
        if not isinstance(row["member"], bool):
            raise fail(line, "member: expected true or false")
        if row["member"]:
            agent.projects.add(self.project)  # type: ignore[arg-type]
        self.handles[handle] = agent.pk

    def create_project(self, line: int, row: dict[str, Any]) -> None:
        if self.project is not None:
            raise fail(line, "a second project row")
        section = SECTION_BY_TYPE["project"]
        values = self.values(line, section, row)
        slug = self.slug or values["slug"]
        prefix = self.key_prefix or values["key_prefix"]
        if Project.objects.filter(slug=slug).exists():
            raise fail(line, f"a project with slug {slug!r} exists; import under a new one with --as SLUG")
        if not KEY_PREFIX.match(prefix):
            raise fail(line, f"key prefix {prefix!r}: uppercase letters and digits, starting with a letter")
        if Project.objects.filter(key_prefix=prefix).exists():
            raise fail(line, f"key prefix {prefix!r} is taken on this server; choose one with --key-prefix")
        values.update(slug=slug, key_prefix=prefix)
        for name in ("repository", "remote"):
            values[name] = git_location(line, name, values[name] or "", allow_repository=self.allow_repository)
        try:
            validate_default_branch(values["default_branch"])
        except LedgerError as exc:
            raise fail(line, exc.message) from None
        self.project = Project(**values)
        try:
            self.project.full_clean()
        except ValidationError as exc:
            raise fail(line, f"not a valid project: {exc.messages}") from None
        self.project.save()
        self.events_before = Event.objects.aggregate(last=Max("id"))["last"] or 0

    def values(self, line: int, section: Section, row: dict[str, Any]) -> dict[str, Any]:
        cols = self.columns_by_type.setdefault(section.type, columns(section))
        self._expect(line, row, {"type", *(["id"] if has_own_id(section) else []), *(c.name for c in cols)})
        values: dict[str, Any] = {}
        for column in cols:
            raw = row[column.name]
            if column.references and raw is not None:
                values[column.attname] = self.reference(line, section, column, raw)
                continue
            try:
                values[column.attname] = decode(column.field, raw)
            except ValueError as exc:
                raise fail(line, f"{column.name}: {exc}") from None
        return values

    def reference(self, line: int, section: Section, column: Column, raw: Any) -> int:
        names = {AGENT: self.handles, USER: self.usernames}.get(column.references)
        if names is not None:
            if raw not in names:
                raise fail(line, f"{column.name} names {column.references} {raw!r}, which no earlier row defines")
            return names[raw]
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise fail(line, f"{column.name}: expected the id of a {column.references} row")
        if section.type == "decision" and column.name == "superseded_by":
            return raw  # may point forward; resolved once every decision is in (see `supersede`)
        known = self.ids.get(column.references, {})
        if raw not in known:
            raise fail(line, f"{column.name} references {column.references} {raw}, which no earlier row defines")
        return known[raw]

    def queue(self, line: int, section: Section, row: dict[str, Any]) -> None:
        values = self.values(line, section, row)
        source = row.get("id") if has_own_id(section) else None
        if source is not None and (not isinstance(source, int) or isinstance(source, bool)):
            raise fail(line, "id must be an integer")
        if "project_id" in {f.attname for f in section.model._meta.concrete_fields}:
            values["project_id"] = self.project.pk  # type: ignore[union-attr]
        if section.type == "task":
            values["key"] = f"{self.project.key_prefix}-{values['number']}"  # type: ignore[union-attr]
        elif section.type == "attempt":
            values["token_salt"] = secrets.token_hex(16)
            values["token_hash"] = hash_token(secrets.token_urlsafe(32))  # nobody holds it: see the docstring
            claimed_at: int | None = values.pop(EVENT_ID_COLUMNS["attempt"])
            if claimed_at is not None and source is not None:
                insort(self.claims, (claimed_at, source))
            values[EVENT_ID_COLUMNS["attempt"]] = None
        elif section.type == "decision" and values["superseded_by_id"] is not None:
            self.supersessions.append((line, source, values["superseded_by_id"], values["status"]))  # type: ignore[arg-type]
            values.update(superseded_by_id=None, status=DecisionStatus.ACTIVE)
        elif section.type == "event":
            self.event(line, values, source)
        obj = section.model(**values)
        check_row(line, section, obj, values, now=self.now)
        if section.type == "event":
            self.last_event = obj  # type: ignore[assignment]
        self.pending.append((obj, source))
        self.pending_type = section.type
        if len(self.pending) >= BATCH_ROWS:
            self.flush(line)

    def event(self, line: int, values: dict[str, Any], source: int | None) -> None:
        if source is None or source <= self.last_event_source:
            raise fail(line, "event ids must increase: the file is out of order")
        for key, target in payload_references(values["type"]).items():
            payload = values["payload"]
            if isinstance(payload, dict) and isinstance(payload.get(key), int):
                payload[key] = self.ids.get(target, {}).get(payload[key], payload[key])
        # Attempts that claimed before this event point at the event before it.
        while self.claims and self.claims[0][0] < source:
            self.claim_events[self.claims.pop(0)[1]] = self.last_event
        self.last_event_source = source

    def flush(self, line: int) -> None:
        if not self.pending:
            return
        model = type(self.pending[0][0])
        objects = [obj for obj, _ in self.pending]
        try:
            with transaction.atomic():
                model.objects.bulk_create(objects)  # type: ignore[attr-defined]
        except (DatabaseError, ValueError) as exc:
            raise fail(line, f"the database refused the {self.pending_type} rows before this line: {exc}") from None
        if self.pending_type != "event":
            known = self.ids.setdefault(self.pending_type, {})
            for obj, source in self.pending:
                if source in known:
                    raise fail(line, f"two {self.pending_type} rows with id {source} before this line")
                if source is not None:
                    known[source] = obj.pk
        self.pending = []

    # --- the end ---------------------------------------------------------------

    def finish(self, line: int, declared: dict[str, int]) -> None:
        if self.project is None:
            raise fail(line, "the end row before any project row: the file holds no project")
        self.flush(line)
        for at, decision, by, status in self.supersessions:
            target = self.ids.get("decision", {}).get(by)
            if target is None:
                raise fail(at, f"superseded_by references decision {by}, which no row defines")
            Decision.objects.filter(pk=self.ids["decision"][decision]).update(superseded_by_id=target, status=status)
        for _, attempt in self.claims:
            self.claim_events[attempt] = self.last_event
        for attempt, event in self.claim_events.items():
            Attempt.objects.filter(pk=self.ids["attempt"][attempt]).update(
                event_id_at_claim=event.pk if event is not None else self.events_before
            )
        WebhookDelivery.objects.filter(event__project=self.project).update(
            status=DeliveryStatus.DEAD, last_error="imported history: not delivered"
        )
        differing = sorted(k for k in set(declared) | set(self.counts) if declared.get(k, 0) != self.counts.get(k, 0))
        if differing:
            detail = ", ".join(f"{k}: {declared.get(k, 0)} declared, {self.counts.get(k, 0)} read" for k in differing)
            raise fail(line, f"the end row's counts do not match the rows read ({detail})")


def project_import(
    *,
    lines: Iterable[str],
    slug: str | None = None,
    key_prefix: str | None = None,
    dry_run: bool = False,
    allow_repository: bool = False,
) -> ImportResult:
    """Import an export file's lines as a new project (refusing an existing slug or key prefix), in one transaction.

    `allow_repository`: take a project repository (or remote) that is a path on this machine.
    """
    importer = _Importer(slug=slug, key_prefix=key_prefix, now=clock.now(), allow_repository=allow_repository)
    number = 0
    ended = False
    try:
        with transaction.atomic():
            for number, text in enumerate(lines, start=1):
                if ended:
                    raise fail(number, "a row after the end row")
                row = parse_row(number, text)
                if number == 1:
                    importer.header(number, row)
                elif row["type"] == END:
                    counts = row.get("counts")
                    if set(row) != {"type", "counts"} or not isinstance(counts, dict):
                        raise fail(number, "the end row holds exactly its counts")
                    importer.finish(number, counts)
                    ended = True
                else:
                    importer.row(number, row)
            if number == 0:
                raise fail(1, "the file is empty")
            if not ended:
                raise fail(number, "the file ends without its end row: it is truncated")
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass
    project = importer.project
    assert project is not None
    return ImportResult(slug=project.slug, key_prefix=project.key_prefix, counts=importer.counts, dry_run=dry_run)
