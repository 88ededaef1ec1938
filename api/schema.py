"""The OpenAPI schema's plumbing: component naming, routed views, the bearer scheme, the
pieces every API view shares (the error envelope, the common headers), and the hooks that
state what the API enforces beyond the serializers: closed request bodies and the links a
client follows from one answer to the next call.

A client generated from the schema must be able to call every operation correctly, so every
rule the API checks is in the schema; the few that OpenAPI 3.0 cannot state (a rule across
a header and the body, or one that depends on the stored task) are in the operation's
description.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from core.errors import ERRORS_BY_CODE

# DRF refuses a NUL in any text (ProhibitNullCharactersValidator); a field that trims
# (`trim_whitespace`) strips with `str.strip()`, so a non-blank one needs a character that
# `str.isspace()` does not count as whitespace: exactly these (tests/api/test_schema.py checks).
PYTHON_WHITESPACE = r"\t-\r\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
TEXT_PATTERN = r"^[^\u0000]*$"
# Leading whitespace, then the first other character: one way to match, so linear for any regex engine.
NON_BLANK_TEXT_PATTERN = rf"^[{PYTHON_WHITESPACE}]*[^\u0000{PYTHON_WHITESPACE}][^\u0000]*$"
# Keys of a field's schema that already say what its text may be.
_FORMAT_KEYWORDS = frozenset({"pattern", "enum", "format", "oneOf", "anyOf", "allOf", "$ref"})


def _state_text_rules(field: serializers.CharField, schema: dict[str, Any]) -> None:
    """What DRF's CharField checks in a request, in the field's schema: no NUL, and not blank unless allowed."""
    if _FORMAT_KEYWORDS & set(schema) or schema.get("type") != "string":
        return
    if field.allow_blank:
        schema["pattern"] = TEXT_PATTERN
        return
    schema["minLength"] = max(schema.get("minLength", 0), 1)
    schema["pattern"] = NON_BLANK_TEXT_PATTERN if field.trim_whitespace else TEXT_PATTERN


def expand_routes(endpoints: list[tuple[str, str, str, Any]], **kwargs: Any) -> list[tuple[str, str, str, Any]]:
    """drf-spectacular preprocessing hook: document each routed method with its own view."""
    return [
        (path, regex, method, getattr(callback, "routes", {}).get(method, callback))
        for path, regex, method, callback in endpoints
    ]


class ApiAutoSchema(AutoSchema):
    """Names a view's serializers after the view: `TaskClaimApi.InputSerializer` → `TaskClaimInput`.

    That holds for a serializer declared inside the view and for a shared one
    the view names as its `InputSerializer`/`OutputSerializer`
    (`OutputSerializer = ClaimOutputSerializer` is `TaskClaimOutput` in one
    view and `ClaimNextOutput` in the other): a client generated from the
    schema gets one type per operation.
    """

    def get_serializer_name(
        self, serializer: serializers.Serializer[Any], direction: Literal["request", "response"]
    ) -> str:
        view = type(self.view)
        for role in ("Input", "Output"):
            if getattr(view, f"{role}Serializer", None) is type(serializer):
                return view.__name__.removesuffix("Api") + role
        parts = type(serializer).__qualname__.split(".")
        if len(parts) < 2:
            return str(super().get_serializer_name(serializer, direction))
        outer = parts[-2].removesuffix("Api")
        return outer + parts[-1]

    def _map_basic_serializer(self, serializer: Any, direction: Literal["request", "response"]) -> dict[str, Any]:
        """A request's text fields say what DRF refuses (NUL, blank); `schema_rules` adds what the service checks.

        `schema_rules` on an input serializer is merged into its component: the
        rules its service keeps across fields (`minProperties`, `not`), which a
        field cannot say about itself.
        """
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction != "request":
            return schema
        instance = force_instance(serializer)
        for name, field in instance.fields.items():
            shown = schema["properties"].get(name)
            if shown is None:
                continue
            if isinstance(field, serializers.ListField) and isinstance(field.child, serializers.CharField):
                if isinstance(shown.get("items"), dict):
                    _state_text_rules(field.child, shown["items"])
            elif isinstance(field, serializers.CharField):
                _state_text_rules(field, shown)
        schema.update(getattr(type(instance), "schema_rules", {}))
        return schema


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent's API token (`manage.py create_agent` prints it once).",
        }


class ErrorBodySerializer(serializers.Serializer[Any]):
    code = serializers.ChoiceField(choices=sorted(ERRORS_BY_CODE), help_text="Stable error code (SPEC §8).")
    message = serializers.CharField(help_text="For humans; do not parse.")
    retryable = serializers.BooleanField(help_text="Retry with the same Idempotency-Key after a pause.")
    details = serializers.DictField(help_text="Machine-readable facts about the error, e.g. `fields`.")


class ErrorEnvelopeSerializer(serializers.Serializer[Any]):
    error = ErrorBodySerializer()


def _codes_for(status: int) -> list[str]:
    return sorted(code for code, error in ERRORS_BY_CODE.items() if error.http_status == status)


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`extend_schema(responses=...)` entries for these statuses, each naming its codes."""
    return {
        status: OpenApiResponse(
            response=ErrorEnvelopeSerializer,
            description="Error envelope; code one of: " + ", ".join(_codes_for(status)),
        )
        for status in statuses
    }


# Every request may fail authentication, or find the database busy.
READ_ERRORS = (400, 401, 403, 404, 429, 503)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 415, 429, 503)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 128},
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "1-128 visible ASCII characters, unique per agent. The same key with the same request replays the "
        "stored status and body; with another request it is IDEMPOTENCY_CONFLICT. Kept 24 hours."
    ),
    pattern=r"^[\x21-\x7e]{1,128}$",
)
# `leases.tokens`: 32 bytes of HMAC-SHA256, URL-safe base64 without padding. The API answers a
# missing or over-long token with VALIDATION_ERROR and any other wrong one with INVALID_LEASE_TOKEN.
LEASE_TOKEN_PATTERN = r"^[A-Za-z0-9_-]{43}$"  # noqa: S105 - a format, not a secret
EPOCH_MAX = 2**31 - 1
ATTEMPT_ID_MAX = 10**18 - 1

LEASE_TOKEN_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 43,
    "maxLength": 43,
    "pattern": LEASE_TOKEN_PATTERN,
}
LEASE_EPOCH_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": EPOCH_MAX}
# The `attemptid` path converter: no sign, no leading zero, at most 18 digits.
ATTEMPT_ID_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": ATTEMPT_ID_MAX}

LEASE_TOKEN = OpenApiParameter(
    "X-Lease-Token",
    LEASE_TOKEN_SCHEMA,
    OpenApiParameter.HEADER,
    required=True,
    description="`lease_token` from the claim.",
)
LEASE_EPOCH = OpenApiParameter(
    "X-Lease-Epoch", LEASE_EPOCH_SCHEMA, OpenApiParameter.HEADER, required=True, description="`epoch` from the claim."
)
HOLDER_HEADERS = [LEASE_TOKEN, LEASE_EPOCH, IDEMPOTENCY_KEY]


# --- postprocessing hooks ---------------------------------------------------------------


def _component_name(ref: str) -> str:
    return ref.rsplit("/", 1)[1]


def _request_bodies(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        operation["requestBody"]
        for item in result["paths"].values()
        for operation in item.values()
        if "requestBody" in operation
    ]


def _body_component(body: dict[str, Any]) -> str | None:
    ref = body["content"].get("application/json", {}).get("schema", {}).get("$ref")
    return _component_name(ref) if ref else None


def _variants(name: str, components: dict[str, Any]) -> list[str]:
    """The component itself, or the variants of a `oneOf`."""
    one_of = components[name].get("oneOf")
    return [_component_name(variant["$ref"]) for variant in one_of] if one_of else [name]


def _nested_components(component: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    """The object components a request component holds in its fields (a plan's tasks), recursively."""
    found: list[dict[str, Any]] = []
    for shown in component.get("properties", {}).values():
        ref = shown.get("$ref") or (shown.get("items") or {}).get("$ref")
        if ref and components[_component_name(ref)].get("type") == "object":
            inner = components[_component_name(ref)]
            found.extend([inner, *_nested_components(inner, components)])
    return found


def close_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: a request body holds only the fields its component names,
    and a body that must hold a field is required.

    The API refuses an unknown body field (`api.inputs.body_input`, VALIDATION_ERROR), so every
    request-body component says `additionalProperties: false` (a `oneOf`, on each variant), and
    so does every object it nests (a plan's tasks and decisions: `ledger.apis.plans.plan_input`). A
    missing body reads as `{}`, which a component with required fields (or `minProperties`) refuses.
    """
    components = result.get("components", {}).get("schemas", {})
    for body in _request_bodies(result):
        name = _body_component(body)
        if name is None:
            continue
        variants = [components[variant] for variant in _variants(name, components)]
        for variant in variants:
            variant["additionalProperties"] = False
            for nested in _nested_components(variant, components):
                nested["additionalProperties"] = False
        if all(variant.get("required") or variant.get("minProperties", 0) > 0 for variant in variants):
            body["required"] = True
    return result


HOLDER_LINK_TARGETS = {
    "RenewLease": "attempts_renew",
    "AddNote": "attempts_notes_create",
    "RecordGit": "attempts_git",
    "FinishAttempt": "attempts_finish",
    "ReleaseAttempt": "attempts_release",
    "MintAttemptToken": "attempts_token",
    "RecordEnvironment": "attempts_environment",
}


def _claim_links() -> dict[str, Any]:
    """A claim's answer carries everything a holder call needs: the attempt id, the token, the epoch."""
    holder = {
        "path.attempt_id": "$response.body#/attempt/id",
        "header.X-Lease-Token": "$response.body#/lease_token",
        "header.X-Lease-Epoch": "$response.body#/epoch",
    }
    links: dict[str, Any] = {
        name: {
            "operationId": target,
            "parameters": dict(holder),
            "description": "A holder call on the claimed attempt.",
        }
        for name, target in HOLDER_LINK_TARGETS.items()
    }
    links["ReadAttempt"] = {
        "operationId": "attempts_retrieve",
        "parameters": {"path.attempt_id": "$response.body#/attempt/id"},
        "description": "The claimed attempt and its notes.",
    }
    links["UpdateHeldTask"] = {
        "operationId": "tasks_partial_update",
        "parameters": {
            "path.key": "$response.body#/task/key",
            "header.If-Match": "$response.body#/task/version",
            "header.X-Attempt-Id": "$response.body#/attempt/id",
            "header.X-Lease-Token": "$response.body#/lease_token",
            "header.X-Lease-Epoch": "$response.body#/epoch",
        },
        "description": "The holder's update of the claimed task; renews the lease.",
    }
    links["ReadAttempt"] = {
        "operationId": "attempts_retrieve",
        "parameters": {"path.attempt_id": "$response.body#/attempt/id"},
        "description": "The claimed attempt, with its latest notes.",
    }
    return links


# (operationId, status) -> the links of that response.
LINKS: dict[tuple[str, str], dict[str, Any]] = {
    ("tasks_create", "201"): {
        "ClaimTask": {"operationId": "tasks_claim", "parameters": {"path.key": "$response.body#/key"}},
        "ReadTask": {"operationId": "tasks_retrieve", "parameters": {"path.key": "$response.body#/key"}},
        "UpdateTask": {
            "operationId": "tasks_partial_update",
            "parameters": {"path.key": "$response.body#/key", "header.If-Match": "$response.body#/version"},
        },
        "ClearReservation": {
            "operationId": "tasks_reservation_clear",
            "parameters": {"path.key": "$response.body#/key"},
        },
    },
    ("tasks_claim", "201"): _claim_links(),
    ("claims_next", "201"): _claim_links(),
    # SPEC §16: a review claim answers a claim's shape; a decision and a review name their ids.
    ("reviews_next", "201"): {
        **_claim_links(),
        "ClaimReview": {"operationId": "reviews_claim", "parameters": {"path.review_id": "$response.body#/review/id"}},
        "ReadReview": {
            "operationId": "reviews_retrieve",
            "parameters": {"path.review_id": "$response.body#/review/id"},
        },
    },
    ("reviews_claim", "201"): _claim_links(),
    # SPEC §21.2: a landing's answer carries its holder proof (its finish needs the landing's own task
    # keys in the body, which no link can build: scripts/api-fuzz leaves it to tests/landing).
    ("landings_next", "201"): {
        "RenewLanding": {
            "operationId": "landings_renew",
            "parameters": {
                "path.landing_id": "$response.body#/landing/id",
                "header.X-Lease-Token": "$response.body#/landing/lease_token",
                "header.X-Lease-Epoch": "$response.body#/landing/epoch",
            },
            "description": "The lander's heartbeat on the landing it claimed.",
        },
        "ReleaseLanding": {
            "operationId": "landings_release",
            "parameters": {
                "path.landing_id": "$response.body#/landing/id",
                "header.X-Lease-Token": "$response.body#/landing/lease_token",
                "header.X-Lease-Epoch": "$response.body#/landing/epoch",
            },
            "description": "Give the claimed landing back (a lander told to stop): the target is free at once.",
        },
    },
    ("decisions_create", "201"): {
        "SupersedeDecision": {
            "operationId": "decisions_supersede",
            "parameters": {"path.decision_id": "$response.body#/id"},
        },
        "ReadDecision": {"operationId": "decisions_retrieve", "parameters": {"path.decision_id": "$response.body#/id"}},
    },
}
LINKS[("tasks_create", "201")].update(
    {
        "CommentOnTask": {"operationId": "tasks_comments_create", "parameters": {"path.key": "$response.body#/key"}},
        "ListComments": {"operationId": "tasks_comments_list", "parameters": {"path.key": "$response.body#/key"}},
    }
)


def link_operations(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the OpenAPI links of `LINKS`, on the responses they leave from."""
    operations = {
        operation["operationId"]: operation for item in result["paths"].values() for operation in item.values()
    }
    for (operation_id, status), links in LINKS.items():
        response = operations[operation_id]["responses"][status]
        # A copy each time: the renderer would otherwise write one shared dict as a YAML alias.
        response["links"] = {**response.get("links", {}), **copy.deepcopy(links)}
    return result
