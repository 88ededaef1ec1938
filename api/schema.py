"""The OpenAPI schema's plumbing: component naming, routed views, the bearer scheme, and the
pieces every API view shares (the error envelope, the common headers)."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from config.errors import ERRORS_BY_CODE


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
READ_ERRORS = (400, 401, 403, 404, 503)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 415, 503)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "1-128 visible ASCII characters, unique per agent. The same key with the same request replays the "
        "stored status and body; with another request it is IDEMPOTENCY_CONFLICT. Kept 24 hours."
    ),
    pattern=r"^[\x21-\x7e]{1,128}$",
)
LEASE_TOKEN = OpenApiParameter(
    "X-Lease-Token", str, OpenApiParameter.HEADER, required=True, description="The lease token from the claim."
)
LEASE_EPOCH = OpenApiParameter(
    "X-Lease-Epoch", int, OpenApiParameter.HEADER, required=True, description="The attempt's epoch from the claim."
)
HOLDER_HEADERS = [LEASE_TOKEN, LEASE_EPOCH, IDEMPOTENCY_KEY]
