"""Input fields whose OpenAPI schema states a rule that a service keeps (SPEC §5, §8).

The services check these rules and answer their own errors (INVALID_BRANCH_NAME, or
VALIDATION_ERROR with their details), so each field validates exactly what the plain DRF
field it extends does; the schema tells a client what will be accepted before it asks.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.schema import NON_BLANK_TEXT_PATTERN, TEXT_PATTERN
from environments.models import ENVIRONMENT_NAME_PATTERN
from leases.branches import AGENT_PREFIXES, BRANCH_TYPES, MAX_BRANCH_LENGTH
from leases.models import (
    HOST_MAX_CHARS,
    NEXT_STEP_MAX_CHARS,
    NEXT_STEPS_MAX_ITEMS,
    NOTE_MAX_CHARS,
    WORKTREE_PATH_MAX_CHARS,
)

# `leases.branches.validate_branch_name` as a pattern: `<type>/<description>`, the description
# runs of a-z0-9 joined by single '-' or '.', never ending in `.lock` (git's lock files).
BRANCH_NAME_PATTERN = "^(?:" + "|".join(BRANCH_TYPES + AGENT_PREFIXES) + ")/[a-z0-9]+(?:[-.][a-z0-9]+)*$"
BRANCH_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_BRANCH_LENGTH,
    "pattern": BRANCH_NAME_PATTERN,
    "not": {"pattern": r"\.lock$"},
}
# The `taskkey` path converter (`api.urls.TaskKeyConverter`): `WEB-412`.
TASK_KEY_PATTERN = "^[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}$"
# `leases.services.claims.COMMIT_SHA`.
COMMIT_ID_PATTERN = "^[0-9a-f]{40}$"


@extend_schema_field(BRANCH_NAME_SCHEMA)
class BranchNameField(serializers.CharField):
    """A Conventional Branch 1.1.0 name; `leases.branches` refuses any other with INVALID_BRANCH_NAME."""


@extend_schema_field({"type": "string", "minLength": 40, "maxLength": 40, "pattern": COMMIT_ID_PATTERN})
class CommitIdField(serializers.CharField):
    """A full commit id, 40 lowercase hex characters (`leases.services.claims.validate_base_commit`)."""


@extend_schema_field({"type": "string", "maxLength": 100, "pattern": ENVIRONMENT_NAME_PATTERN})
class EnvironmentNameField(serializers.CharField):
    """The name of one of the project's environments (`environments.models.Environment.name`)."""


@extend_schema_field({"type": "string", "pattern": TASK_KEY_PATTERN})
class TaskKeyField(serializers.CharField):
    """A task's key; one that names no task you can see is refused by the view (VALIDATION_ERROR)."""


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": NOTE_MAX_CHARS, "pattern": NON_BLANK_TEXT_PATTERN})
class NoteContentField(serializers.CharField):
    """A note's text, kept as sent: not blank, at most NOTE_MAX_CHARS (`leases.services.notes.note_add`)."""


@extend_schema_field(
    {
        "type": "array",
        "maxItems": NEXT_STEPS_MAX_ITEMS,
        "items": {"type": "string", "maxLength": NEXT_STEP_MAX_CHARS, "pattern": TEXT_PATTERN},
    }
)
class NextStepsField(serializers.ListField):
    """Next steps, kept as sent: at most NEXT_STEPS_MAX_ITEMS, each at most NEXT_STEP_MAX_CHARS
    (`leases.services.notes.validate_next_steps`)."""


# `leases.services.git_facts`: text facts are non-empty and hold no control character.
_NO_CONTROL = r"[^\u0000-\u001f\u007f]"


@extend_schema_field(
    {
        "type": "string",
        "nullable": True,
        "minLength": 1,
        "maxLength": WORKTREE_PATH_MAX_CHARS,
        "pattern": rf"^(/|[A-Za-z]:[\\/]){_NO_CONTROL}*$",
    }
)
class AbsolutePathField(serializers.CharField):
    """An absolute path (POSIX, or a Windows drive path) without control characters (`git_facts`)."""


@extend_schema_field(
    {
        "type": "string",
        "nullable": True,
        "minLength": 1,
        "maxLength": HOST_MAX_CHARS,
        "pattern": rf"^\S{_NO_CONTROL}*$",
    }
)
class HostNameField(serializers.CharField):
    """A machine's name: not blank, no control characters (`git_facts`)."""
