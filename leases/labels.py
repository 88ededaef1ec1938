"""The attempt label: one line that says who holds a task, where, and at which epoch (SPEC §5).

Labels travel outside the ledger (API, admin, git trailers) and come back
during reconciliation, so the format is strict and exact: a label the parser
accepts renders back to the very same text, and a `Label` that exists can
always be rendered into text the parser accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from core.errors import InvalidBranchName, ValidationFailed
from leases.branches import validate_branch_name

FIELDS: tuple[str, ...] = ("owner", "branch", "env", "task", "epoch")
NONE_VALUE = "-"
_OPTIONAL_FIELDS = frozenset({"branch", "env"})

_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "owner": (re.compile(r"[a-z0-9][a-z0-9._-]{0,63}"), "an agent handle"),
    "env": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*"), "an environment name"),
    "task": (re.compile(r"[A-Z][A-Z0-9]{0,9}-[1-9][0-9]*"), "a task key like WEB-412"),
    # No sign and no leading zero: `int()` would accept `+3` or `03`, which
    # could not render back to the same text.
    "epoch": (re.compile(r"0|[1-9][0-9]*"), "a non-negative integer without leading zeros"),
}
_NEGATIVE_INTEGER = re.compile(r"-[0-9]+")


def _refuse(text: str, field: str | None, problem: str) -> NoReturn:
    subject = f"field {field!r}" if field else "text"
    raise ValidationFailed(f"Label {subject} {problem}.", details={"label": text, "field": field})


def _value_problem(field: str, value: str) -> str | None:
    """Say what is wrong with one field's text, or None when it is well formed."""
    if not value:
        return f"is empty; write {NONE_VALUE!r} for no value" if field in _OPTIONAL_FIELDS else "is empty"
    for separator in (";", "="):
        if separator in value:
            return f"contains {separator!r}: {value!r}"
    if any(character.isspace() for character in value):
        return f"contains whitespace: {value!r}"
    if field == "branch":
        try:
            validate_branch_name(value)
        except InvalidBranchName as error:
            return f"is not a valid branch name ({error.details['rule']}): {value!r}"
        return None
    if field == "epoch" and _NEGATIVE_INTEGER.fullmatch(value):
        return f"is negative: {value!r}"
    pattern, meaning = _FORMATS[field]
    return None if pattern.fullmatch(value) else f"is not {meaning}: {value!r}"


@dataclass(frozen=True)
class Label:
    """A validated label; building one with a bad value fails here, not when it is read back."""

    owner: str
    branch: str | None
    env: str | None
    task: str
    epoch: int

    def __post_init__(self) -> None:
        text = render_label(self)
        for field in FIELDS:
            value = getattr(self, field)
            if value is None and field in _OPTIONAL_FIELDS:
                continue
            expected_type = int if field == "epoch" else str
            if not isinstance(value, expected_type) or isinstance(value, bool):
                _refuse(text, field, f"must be {expected_type.__name__}, not {type(value).__name__}")
            if problem := _value_problem(field, str(value)):
                _refuse(text, field, problem)


def render_label(label: Label) -> str:
    """Write the label the server stores on an attempt; `None` is written as `-`."""
    values = {field: getattr(label, field) for field in FIELDS}
    return ";".join(f"{field}={NONE_VALUE if value is None else value}" for field, value in values.items())


def parse_label(text: str) -> Label:
    """Read a label back, refusing anything `render_label` would not have written."""
    values: dict[str, str] = {}
    for segment in text.split(";"):
        field, equals, value = segment.partition("=")
        if not equals:
            _refuse(text, None, f"segment {segment!r} is not of the form field=value")
        if field not in FIELDS:
            _refuse(text, field, f"is unknown; expected the fields {', '.join(FIELDS)}")
        if field in values:
            _refuse(text, field, "is repeated")
        values[field] = value
    for field in FIELDS:
        if field not in values:
            _refuse(text, field, "is missing")
    for position, (field, expected) in enumerate(zip(values, FIELDS, strict=True), start=1):
        if field != expected:
            _refuse(text, field, f"is out of order: position {position} must be {expected!r}")
    if problem := _value_problem("epoch", values["epoch"]):
        _refuse(text, "epoch", problem)
    # The other values are checked by `Label` itself; the structure is settled
    # by now, so the text it reports in the error is exactly `text`.
    return Label(
        owner=values["owner"],
        branch=None if values["branch"] == NONE_VALUE else values["branch"],
        env=None if values["env"] == NONE_VALUE else values["env"],
        task=values["task"],
        epoch=int(values["epoch"]),
    )
