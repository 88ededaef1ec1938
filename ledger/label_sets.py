"""Capability labels (SPEC §23.1): a task's `requires` and an agent's `labels`, one validation for every door.

A label is a slug: lowercase letters, digits, `-`, `_` and `.`, starting with a letter or a digit, at most
LABEL_MAX_CHARS characters (`gpu`, `cuda-12`, `postgres.16`). A set holds at most LABELS_MAX_ITEMS labels,
without duplicates. A refusal is VALIDATION_ERROR naming the field, with `details.reason` one of
`not_a_list`, `invalid_label`, `too_many_labels`, `duplicate_label` (stable: clients may branch on it).
"""

from __future__ import annotations

import re
from typing import Any

from core.errors import ValidationFailed

LABEL_MAX_CHARS = 64
LABELS_MAX_ITEMS = 20
LABEL_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _refuse(field: str, requirement: str, reason: str, **details: Any) -> ValidationFailed:
    return ValidationFailed(
        f"{field} must be {requirement}.", details={"fields": {field: [requirement]}, "reason": reason, **details}
    )


def validate_label_set(value: Any, *, field: str) -> list[str]:
    """`value` as a list of labels, in the given order; VALIDATION_ERROR naming `field` otherwise."""
    if not isinstance(value, list | tuple):
        raise _refuse(field, "a list of labels", "not_a_list")
    if len(value) > LABELS_MAX_ITEMS:
        raise _refuse(field, f"at most {LABELS_MAX_ITEMS} labels", "too_many_labels", count=len(value))
    seen: set[str] = set()
    for label in value:
        if not isinstance(label, str) or len(label) > LABEL_MAX_CHARS or not LABEL_PATTERN.fullmatch(label):
            shown = label[:80] if isinstance(label, str) else repr(label)[:80]
            raise _refuse(
                field,
                f"labels of lowercase letters, digits, '-', '_' and '.' (starting with a letter or digit), "
                f"at most {LABEL_MAX_CHARS} characters each",
                "invalid_label",
                label=shown,
            )
        if label in seen:
            raise _refuse(field, "labels without duplicates", "duplicate_label", label=label)
        seen.add(label)
    return list(value)


def parse_label_list(text: str) -> list[str]:
    """Comma-separated labels as typed in a form or on a command line (`gpu, cuda`); blanks dropped.

    The result still goes through `validate_label_set` (the services do it)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]
