"""Branch names an attempt may work on: Conventional Branch 1.1.0 (SPEC §5).

The ledger names branches in labels and reconciles them against git, so a name
it accepts must be one git can create and one a person can read at a glance.
Each refusal carries a stable rule id so agents can fix the name mechanically
rather than parse prose.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NoReturn

from core.errors import InvalidBranchName

BRANCH_TYPES: tuple[str, ...] = ("feature", "feat", "bugfix", "fix", "hotfix", "release", "chore")
AGENT_PREFIXES: tuple[str, ...] = ("ai", "claude", "codex", "copilot", "cursor")
TRUNK_NAMES: frozenset[str] = frozenset({"main", "master", "develop"})
MAX_BRANCH_LENGTH = 100

_ALLOWED_TYPES = frozenset(BRANCH_TYPES + AGENT_PREFIXES)
_DESCRIPTION_CHARACTER = re.compile(r"[a-z0-9.-]")
_DOT_OUTSIDE_ALPHANUMERICS = re.compile(r"(?<![a-z0-9])\.|\.(?![a-z0-9])")
_NOT_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")


def _refuse(name: str, rule: str, message: str) -> NoReturn:
    raise InvalidBranchName(f"Branch {name!r}: {message}", details={"branch": name, "rule": rule})


def validate_branch_name(name: str) -> str:
    """Return `name` if an attempt may use it, else name the first rule it breaks.

    Rules run from the broadest to the narrowest so the reported rule is the
    one a person would fix first: `Feature/X` is about case, not about type.
    """
    if name in TRUNK_NAMES:
        _refuse(name, "trunk", "trunk branches are never worked on by an attempt")
    if len(name) > MAX_BRANCH_LENGTH:
        _refuse(name, "too_long", f"is {len(name)} characters; at most {MAX_BRANCH_LENGTH} are allowed")
    if any(character.isspace() for character in name):
        _refuse(name, "whitespace", "must not contain whitespace")
    if any(character.isupper() for character in name):
        _refuse(name, "uppercase", "must be lowercase")
    if "_" in name:
        _refuse(name, "underscore", "must use '-' instead of '_'")
    branch_type, slash, description = name.partition("/")
    if not slash:
        _refuse(name, "missing_type", "must start with '<type>/', e.g. 'feature/'")
    if branch_type not in _ALLOWED_TYPES:
        allowed = ", ".join(BRANCH_TYPES + AGENT_PREFIXES)
        _refuse(name, "unknown_type", f"type {branch_type!r} is not one of: {allowed}")
    if "/" in description:
        _refuse(name, "extra_slash", "must contain exactly one '/'")
    if not description:
        _refuse(name, "empty_description", "needs a description after the '/'")
    if invalid := sorted({c for c in description if not _DESCRIPTION_CHARACTER.fullmatch(c)}):
        _refuse(name, "invalid_character", f"description may hold only a-z, 0-9, '-' and '.', not {invalid}")
    if description.startswith("-") or description.endswith("-"):
        _refuse(name, "edge_hyphen", "description must not start or end with '-'")
    if "--" in description:
        _refuse(name, "double_hyphen", "description must not contain consecutive hyphens")
    if description.startswith(".") or description.endswith("."):
        _refuse(name, "edge_dot", "description must not start or end with '.'")
    if ".." in description:
        _refuse(name, "double_dot", "description must not contain consecutive dots")
    if _DOT_OUTSIDE_ALPHANUMERICS.search(description):
        _refuse(name, "dot_not_between_alphanumerics", "a '.' must sit between two letters or digits")
    if description.endswith(".lock"):
        # Git reserves `*.lock` for its own lock files and refuses such refs.
        _refuse(name, "lock_suffix", "must not end with '.lock'")
    return name


def _slugify(text: str) -> str:
    """Fold to ASCII first so `Café` keeps its letters instead of losing the word."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NOT_ALPHANUMERIC.sub("-", ascii_text.lower()).strip("-")


def suggest_branch_name(*, agent_kind: str, task_key: str, title: str) -> str:
    """Propose a valid branch that names who works on it and for which task.

    The task key leads the description and is never shortened by a long
    title; the title is cut at a word boundary when one exists.
    """
    if agent_kind in AGENT_PREFIXES:
        prefix = agent_kind
    elif agent_kind == "human":
        prefix = "feature"
    else:
        prefix = "ai"
    key = _slugify(task_key) or "task"
    words = _slugify(title)
    room = max(MAX_BRANCH_LENGTH - len(f"{prefix}/{key}-"), 0)
    if len(words) > room:
        cut = words[:room]
        if words[room] != "-":
            cut = cut.rpartition("-")[0] or cut
        words = cut.rstrip("-")
    description = f"{key}-{words}" if words else key
    # Only a task key far longer than any project issues can still overflow.
    description = description[: MAX_BRANCH_LENGTH - len(prefix) - 1].rstrip("-")
    return validate_branch_name(f"{prefix}/{description}")
