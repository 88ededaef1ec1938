"""An export file is untrusted input (issue 27, L4): its framing bounded, every row checked as the API checks it.

A line is read with a bound (1 MB) and never whole, JSON nesting is bounded
before it is parsed, and a row's values go through the validators the API
and the admin use, plus `full_clean()`: an import accepts nothing the API
would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from core.errors import LedgerError, ValidationFailed
from leases.services.git_facts import git_facts, validate_commit
from ledger.models import EventType
from ledger.services.projects import (
    is_local_repository,
    validate_remote,
    validate_repository,
)
from operations.transfer.rows import (
    Section,
)
from push.webhooks import check_target

MAX_LINE_BYTES = 1 << 20
MAX_NESTING = 64
# The attempt columns that are git facts, checked as `POST /attempts/{id}/git/` checks them.
GIT_FACT_COLUMNS = ("branch", "base_commit", "head_commit", "commits_ahead", "dirty", "pushed", "worktree_path", "host")
_GIT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git": 9418}


def fail(line: int, message: str) -> ValidationFailed:
    return ValidationFailed(f"line {line}: {message}", details={"line": line})


def read_lines(stream: BinaryIO) -> Iterator[str]:
    """The lines of a binary file as text, each read with a bound: a line over 1 MB is refused, never read whole."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not (len(raw) == MAX_LINE_BYTES + 1 and raw.endswith(b"\n")):
            raise fail(number, f"the line is longer than {MAX_LINE_BYTES} bytes; no export row is that long")
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(number, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _nesting(text: str) -> int:
    """How deep JSON arrays and objects nest in `text` (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif character in "]}":
            depth -= 1
    return deepest


def check_remote_host(line: int, url: str, *, field: str) -> None:
    """The host of a project's git URL passes the webhooks' address policy (no loopback, private, link-local)."""
    if "://" in url:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or _GIT_PORTS.get(parts.scheme.lower(), 443)
    else:  # scp-like user@host:path
        host, port = url.split("@", 1)[1].split(":", 1)[0], 22
    try:
        check_target(f"https://[{host}]:{port}/" if ":" in host else f"https://{host}:{port}/")
    except ValidationFailed as exc:
        raise fail(line, f"{field} {url[:200]!r}: {exc.message}") from None


def parse_row(line: int, text: str) -> dict[str, Any]:
    if len(text) > MAX_LINE_BYTES:
        raise fail(line, f"the line is longer than {MAX_LINE_BYTES} bytes; no export row is that long")
    if text.count("[") + text.count("{") > MAX_NESTING and _nesting(text) > MAX_NESTING:
        raise fail(line, f"JSON nested deeper than {MAX_NESTING} levels; no export row is")
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(line, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise fail(line, f"JSON nested deeper than {MAX_NESTING} levels; no export row is") from None
    if not isinstance(row, dict) or "type" not in row:
        raise fail(line, "a row must be a JSON object with a type")
    return row


def git_location(line: int, name: str, value: str, *, allow_repository: bool) -> str:
    """A project's repository or remote under the admin's rules, the address policy, and `--allow-repository`."""
    try:
        checked = validate_repository(value) if name == "repository" else validate_remote(value)
    except LedgerError as exc:
        raise fail(line, exc.message) from None
    if not checked:
        return checked
    if is_local_repository(checked):
        if not allow_repository:
            raise fail(
                line,
                f"{name} {checked[:200]!r} is on this machine; the server would read it with its own "
                "permissions. Import with --allow-repository if you mean it.",
            )
        return checked
    check_remote_host(line, checked, field=name)
    return checked


def check_row(line: int, section: Section, obj: models.Model, values: dict[str, Any], *, now: datetime) -> None:
    """What the API refuses, refused here too: field validation, then the rules of the row's kind."""
    relations = [f.name for f in section.model._meta.concrete_fields if f.is_relation]
    try:
        obj.full_clean(
            exclude=[*relations, "token_hash", "token_salt"], validate_unique=False, validate_constraints=False
        )
    except ValidationError as exc:
        raise fail(line, f"not a valid {section.type} row: {exc.messages}") from None
    if section.type == "event" and values["type"] not in EventType.values:
        raise fail(line, f"event type {str(values['type'])[:64]!r} is not one the ledger writes")
    if section.type == "attempt":
        try:
            git_facts({name: values[name] for name in GIT_FACT_COLUMNS if values.get(name) not in (None, "")})
        except LedgerError as exc:
            raise fail(line, f"{exc.message} ({exc.code})") from None
    elif section.type == "review" and values.get("head_commit"):
        try:
            validate_commit(values["head_commit"], field="head_commit")
        except LedgerError as exc:
            raise fail(line, exc.message) from None
    expires = values.get("lease_expires_at")
    if expires is not None and expires > now + timedelta(seconds=settings.LEASEHOLD_MAX_LEASE_SECONDS):
        raise fail(line, "lease_expires_at is beyond the longest lease from now (LEASEHOLD_MAX_LEASE_SECONDS)")
