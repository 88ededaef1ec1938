"""Input fields whose OpenAPI schema states a rule that a service keeps (SPEC §5, §8).

The services check these rules and answer their own errors (INVALID_BRANCH_NAME, or
VALIDATION_ERROR with their details), so each field validates exactly what the plain DRF
field it extends does; the schema tells a client what will be accepted before it asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

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
from ledger.label_sets import LABEL_MAX_CHARS, LABELS_MAX_ITEMS, validate_label_set
from ledger.models import BUDGET_COST_DIGITS
from ledger.paths import COST_MAX, COST_PLACES, PATH_MAX_CHARS, PATHS_MAX_ITEMS, TOKENS_MAX

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


# `ledger.paths.normalise_paths`: relative, no backslash, no control character, no `..` segment.
REPOSITORY_PATH_PATTERN = r"^(?=.*[^\s./])(?![/\\])(?![A-Za-z]:)(?!(?:.*/)?\.\.(?:/|$))[^\\\u0000-\u001f\u007f]+$"

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
        # Not blank as Python's `str.strip()` sees it: JSON Schema's `\s` (ECMAScript) leaves out U+0085.
        "pattern": rf"^[^\s\u0000-\u001f\u007f\u0085]{_NO_CONTROL}*$",
    }
)
class HostNameField(serializers.CharField):
    """A machine's name: not blank, no control characters (`git_facts`)."""


# `ledger.paths.validate_cost`: 0 to COST_MAX, at most COST_PLACES decimal places.
COST_PATTERN = r"^(?:(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,6})?|1000000000(?:\.0{1,6})?)$"


@extend_schema_field({"type": "string", "pattern": COST_PATTERN})
class CostField(serializers.DecimalField):
    """US dollars. The schema states the string form; a JSON number with at most 6 places is taken too."""


@extend_schema_field({"type": "string", "pattern": COST_PATTERN, "nullable": True})
class NullableCostField(serializers.DecimalField):
    """A budget in US dollars, or null for no limit (see `CostField`)."""


class UsageSerializer(serializers.Serializer[Any]):
    """Usage increments a holder call reports (SPEC §19); unknown names are refused.

    The door checks shapes; `leases.services.usage.validate_usage` keeps the rules.
    """

    input_tokens = serializers.IntegerField(required=False, min_value=0, max_value=TOKENS_MAX)
    output_tokens = serializers.IntegerField(required=False, min_value=0, max_value=TOKENS_MAX)
    cost_usd = CostField(
        required=False,
        max_digits=BUDGET_COST_DIGITS,
        decimal_places=COST_PLACES,
        min_value=Decimal(0),
        max_value=COST_MAX,
        help_text="US dollars, a decimal string (or a JSON number) with at most 6 decimal places.",
    )

    # Unknown names are refused (`to_internal_value`): the schema says so of this nested object too.
    schema_rules: ClassVar[dict[str, Any]] = {"additionalProperties": False}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


def usage_field() -> UsageSerializer:
    return UsageSerializer(required=False, help_text="Usage since your last report: tokens and US dollars (SPEC §19).")


@extend_schema_field(
    {
        "type": "array",
        "maxItems": PATHS_MAX_ITEMS,
        "items": {"type": "string", "minLength": 1, "maxLength": PATH_MAX_CHARS, "pattern": REPOSITORY_PATH_PATTERN},
    }
)
class RepositoryPathsField(serializers.ListField):
    """Repository-relative paths (`ledger.paths.normalise_paths` normalises them and refuses the others)."""


def paths_field(help_text: str) -> RepositoryPathsField:
    return RepositoryPathsField(child=serializers.CharField(trim_whitespace=False), required=False, help_text=help_text)


def budget_tokens_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=TOKENS_MAX,
        help_text="Tokens (input + output) all attempts may spend; null: no limit.",
    )


def budget_cost_field() -> serializers.DecimalField:
    return NullableCostField(
        required=False,
        allow_null=True,
        max_digits=BUDGET_COST_DIGITS,
        decimal_places=COST_PLACES,
        min_value=Decimal(0),
        max_value=COST_MAX,
        help_text="US dollars all attempts may spend (at most 6 decimal places); null: no limit.",
    )


# `ledger.label_sets.LABEL_PATTERN` as a JSON Schema pattern.
LABEL_SCHEMA: dict[str, Any] = {"type": "string", "maxLength": LABEL_MAX_CHARS, "pattern": "^[a-z0-9][a-z0-9._-]*$"}


@extend_schema_field({"type": "array", "maxItems": LABELS_MAX_ITEMS, "uniqueItems": True, "items": LABEL_SCHEMA})
class LabelSetField(serializers.ListField):
    """Capability labels (`requires`, an agent's `labels`): `ledger.label_sets.validate_label_set` decides,
    here as in the services (VALIDATION_ERROR naming the field, with `details.reason`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField())
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        return validate_label_set(data, field=self.field_name or "labels")
