"""Git facts: what a holder reports about its branch and worktree (SPEC §15.4), one rule for every door.

`POST /attempts/{id}/git/` (`attempt_set_git`) and finish's `git` object
(`attempt_finish`) both validate with `git_facts` before their transaction
and write with `record_git_facts` inside it, under the holder's lock: a
change of branch rewrites the label, and every change appends one
`attempt.updated` naming exactly what changed. A fact that is not given
(or given as null) is left as it was; nothing here clears a fact.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from core.errors import ValidationFailed
from leases.branches import validate_branch_name
from leases.labels import parse_label, render_label
from leases.models import HOST_MAX_CHARS, WORKTREE_PATH_MAX_CHARS, Attempt
from ledger.actors import Actor
from ledger.models import EventType
from ledger.services import event_append

COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
COMMITS_AHEAD_MAX = 2**31 - 1
GIT_FACT_FIELDS = (
    "branch",
    "base_commit",
    "head_commit",
    "commits_ahead",
    "dirty",
    "pushed",
    "worktree_path",
    "host",
)
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def _refuse(field: str, requirement: str) -> ValidationFailed:
    return ValidationFailed(f"{field} must be {requirement}.", details={"fields": {field: [requirement]}})


def validate_commit(value: Any, *, field: str = "base_commit") -> str:
    """A full commit id: 40 lowercase hex characters."""
    if not isinstance(value, str) or not COMMIT_SHA.match(value):
        raise _refuse(field, "40 lowercase hex characters")
    return value


def validate_base_commit(base_commit: str) -> str:
    return validate_commit(base_commit, field="base_commit")


def _validate_text(value: Any, *, field: str, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip() or _CONTROL_CHARACTER.search(value):
        raise _refuse(field, "a non-empty string without control characters")
    if len(value) > max_chars:
        raise _refuse(field, f"at most {max_chars} characters")
    return value


def _validate_worktree_path(value: Any) -> str:
    path = _validate_text(value, field="worktree_path", max_chars=WORKTREE_PATH_MAX_CHARS)
    if not (PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()):
        raise _refuse("worktree_path", "an absolute path")
    return path


def _validate_flag(value: Any, *, field: str) -> bool:
    if not isinstance(value, bool):
        raise _refuse(field, "true or false")
    return value


def _validate_commits_ahead(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= COMMITS_AHEAD_MAX:
        raise _refuse("commits_ahead", "an integer >= 0")
    return value


@dataclass(frozen=True)
class GitFacts:
    """Validated git facts; None is "not reported"."""

    branch: str | None = None
    base_commit: str | None = None
    head_commit: str | None = None
    commits_ahead: int | None = None
    dirty: bool | None = None
    pushed: bool | None = None
    worktree_path: str | None = None
    host: str | None = None

    def given(self) -> dict[str, Any]:
        return {name: value for name in GIT_FACT_FIELDS if (value := getattr(self, name)) is not None}


def git_facts(raw: Mapping[str, Any] | None) -> GitFacts:
    """Validate reported facts; an unknown name or a bad value is VALIDATION_ERROR naming the field.

    A bad branch name is INVALID_BRANCH_NAME, as for a claim.
    """
    if raw is None:
        return GitFacts()
    if not isinstance(raw, Mapping):
        raise ValidationFailed("git must be an object of git facts.", details={"fields": {"git": ["an object"]}})
    unknown = sorted(str(name) for name in raw if name not in GIT_FACT_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown git facts: {', '.join(unknown)}; known are {', '.join(GIT_FACT_FIELDS)}.",
            details={"fields": {name: ["unknown field"] for name in unknown}},
        )
    values = {name: value for name, value in raw.items() if value is not None}
    if "branch" in values:
        if not isinstance(values["branch"], str):
            raise _refuse("branch", "a string")
        validate_branch_name(values["branch"])
    for field in ("base_commit", "head_commit"):
        if field in values:
            validate_commit(values[field], field=field)
    if "commits_ahead" in values:
        _validate_commits_ahead(values["commits_ahead"])
    for field in ("dirty", "pushed"):
        if field in values:
            _validate_flag(values[field], field=field)
    if "worktree_path" in values:
        _validate_worktree_path(values["worktree_path"])
    if "host" in values:
        _validate_text(values["host"], field="host", max_chars=HOST_MAX_CHARS)
    return GitFacts(**values)


def record_git_facts(held: Attempt, facts: GitFacts, *, now: datetime, actor: Actor) -> dict[str, Any]:
    """Write the facts that differ onto the held (locked) attempt; returns what changed.

    Runs inside the holder's transaction. Reporting facts is work, not a mere
    renewal: the caller extends the lease with `renewal=False`, which moves
    `last_worked_at`.
    """
    changed = {name: value for name, value in facts.given().items() if getattr(held, name) != value}
    if not changed:
        return {}
    columns = dict(changed)
    if "branch" in changed:
        columns["label"] = render_label(dataclasses.replace(parse_label(held.label), branch=changed["branch"]))
    Attempt.objects.filter(pk=held.pk).update(**columns)
    for name, value in columns.items():
        setattr(held, name, value)
    event_append(
        type=EventType.ATTEMPT_UPDATED,
        actor=actor,
        at=now,
        task=held.task,
        attempt_id=held.pk,
        payload=changed,
    )
    return changed
