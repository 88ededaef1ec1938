"""Repository paths a claim reserves, and budgets, as values (SPEC §19): one validation for every door.

A path is repository-relative, normalised (`./a//b/` → `a/b`), never absolute
and never climbing out (`..`). Two paths overlap when they are equal or one
is a prefix of the other at a `/` boundary (`src` overlaps `src/app.py`,
`src/app` does not overlap `src/application`). Budgets and usage are tokens
(non-negative integers) and US dollars (a decimal with at most 6 places).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from core.errors import ValidationFailed
from ledger.models import PathsMode

PATHS_MAX_ITEMS = 50
PATH_MAX_CHARS = 300
TOKENS_MAX = 10**15
COST_MAX = Decimal("1000000000")
COST_PLACES = 6
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


def _refuse(field: str, requirement: str, **details: Any) -> ValidationFailed:
    return ValidationFailed(f"{field} must be {requirement}.", details={"fields": {field: [requirement]}, **details})


def normalise_path(value: Any, *, field: str = "paths") -> str:
    """One repository-relative path, normalised; VALIDATION_ERROR naming `field` otherwise."""
    if not isinstance(value, str) or not value.strip() or _CONTROL_CHARACTER.search(value):
        raise _refuse(field, "repository-relative paths: non-empty strings without control characters")
    if value.startswith(("/", "\\")) or _DRIVE.match(value):
        raise _refuse(field, "repository-relative paths, not absolute ones", path=value)
    if "\\" in value:
        raise _refuse(field, "paths with '/' as the separator", path=value)
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refuse(field, "paths inside the repository (no '..')", path=value)
    if not parts:
        raise _refuse(field, "a file or directory, not the repository root", path=value)
    path = "/".join(parts)
    if len(path) > PATH_MAX_CHARS:
        raise _refuse(field, f"at most {PATH_MAX_CHARS} characters each", path=path[:80])
    return path


def normalise_paths(value: Any, *, field: str = "paths") -> list[str]:
    """A list of at most PATHS_MAX_ITEMS paths, normalised, duplicates dropped, in the given order."""
    if not isinstance(value, list | tuple):
        raise _refuse(field, "a list of repository-relative paths")
    if len(value) > PATHS_MAX_ITEMS:
        raise _refuse(field, f"at most {PATHS_MAX_ITEMS} paths", count=len(value))
    normalised = [normalise_path(item, field=field) for item in value]
    return list(dict.fromkeys(normalised))


def validate_paths_mode(value: Any, *, field: str = "paths_mode") -> str:
    if value not in PathsMode.values:
        raise _refuse(field, f"one of {', '.join(PathsMode.values)}")
    return str(value)


def paths_overlap(first: str, second: str) -> bool:
    """Equal, or one a prefix of the other at a `/` boundary."""
    if first == second:
        return True
    shorter, longer = (first, second) if len(first) < len(second) else (second, first)
    return longer.startswith(shorter + "/")


def overlapping(requested: Sequence[str], held: Iterable[str]) -> tuple[list[str], list[str]]:
    """The requested paths that overlap one of `held`, and the held ones they overlap."""
    held_list = list(held)
    mine: list[str] = []
    theirs: list[str] = []
    for path in requested:
        hits = [other for other in held_list if paths_overlap(path, other)]
        if hits:
            mine.append(path)
            theirs.extend(hit for hit in hits if hit not in theirs)
    return mine, theirs


def validate_tokens(value: Any, *, field: str) -> int:
    """A non-negative integer count of tokens (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _refuse(field, "a non-negative integer")
    if value > TOKENS_MAX:
        raise _refuse(field, f"at most {TOKENS_MAX}")
    return value


def validate_cost(value: Any, *, field: str) -> Decimal:
    """US dollars: a decimal string or number, ≥ 0, at most COST_PLACES decimal places."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise _refuse(field, "a decimal string or number of US dollars")
    try:
        # A float goes through its shortest repr: 0.1 is "0.1", not 0.1000000000000000055…
        amount = Decimal(str(value).strip()) if not isinstance(value, Decimal) else value
    except InvalidOperation:
        raise _refuse(field, "a decimal string or number of US dollars") from None
    if not amount.is_finite() or amount < 0:
        raise _refuse(field, "a finite, non-negative amount")
    exponent = amount.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -COST_PLACES:
        raise _refuse(field, f"at most {COST_PLACES} decimal places")
    if amount > COST_MAX:
        raise _refuse(field, f"at most {COST_MAX}")
    return amount.quantize(Decimal(1).scaleb(-COST_PLACES))


def validate_budget_tokens(value: Any, *, field: str) -> int | None:
    return None if value is None else validate_tokens(value, field=field)


def validate_budget_cost(value: Any, *, field: str) -> Decimal | None:
    return None if value is None else validate_cost(value, field=field)
