"""`PUT /attempts/{id}/environment/`: the holder records what its environment provider made (SPEC §23.3).

The body replaces the record on the attempt's active allocation; the work
context then shows it in `environment.resources`, so the command gets it as
`LEASEHOLD_ENV_*`. The rules live in `leases.services.provisioning`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiView
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import HOLDER_HEADERS, WRITE_ERRORS, error_responses
from leases.apis.holder import holder_proof_from_headers
from leases.services.provisioning import (
    CONTAINER_MAX_CHARS,
    CONTAINER_PATTERN,
    DATABASE_URL_MAX_CHARS,
    DATABASE_URL_PATTERN,
    HOST_PATH_MAX_CHARS,
    HOST_PATH_PATTERN,
    PORT_MAX,
    PORTS_MAX_ITEMS,
    attempt_record_environment,
)
from ledger import clock


def _text_schema(pattern: str, max_chars: int) -> dict[str, Any]:
    return {"type": "string", "nullable": True, "minLength": 1, "maxLength": max_chars, "pattern": pattern}


@extend_schema_field(_text_schema(DATABASE_URL_PATTERN, DATABASE_URL_MAX_CHARS))
class DatabaseUrlField(serializers.CharField):
    """A URL with a scheme and without a password (`provisioned_values`)."""


@extend_schema_field(_text_schema(CONTAINER_PATTERN, CONTAINER_MAX_CHARS))
class ContainerNameField(serializers.CharField):
    """A container's name: no control characters, no leading space (`provisioned_values`)."""


@extend_schema_field(_text_schema(HOST_PATH_PATTERN, HOST_PATH_MAX_CHARS))
class HostPathField(serializers.CharField):
    """An absolute POSIX path without control characters (`provisioned_values`)."""


class ProvisionedSerializer(serializers.Serializer[Any]):
    """What a provider made; each field optional, null is "not provisioned". The service keeps the rules."""

    database_url = DatabaseUrlField(
        required=False, allow_null=True, trim_whitespace=False, help_text="`LEASEHOLD_ENV_DATABASE_URL`; no password."
    )
    ports = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=PORT_MAX),
        required=False,
        allow_null=True,
        max_length=PORTS_MAX_ITEMS,
        help_text="`LEASEHOLD_ENV_PORTS` (the first is `LEASEHOLD_ENV_PORT`).",
    )
    container = ContainerNameField(
        required=False, allow_null=True, trim_whitespace=False, help_text="`LEASEHOLD_ENV_CONTAINER`."
    )
    host_path = HostPathField(
        required=False, allow_null=True, trim_whitespace=False, help_text="`LEASEHOLD_ENV_HOST_PATH`."
    )


class AttemptEnvironmentApi(ApiView):
    """Record what the runner's environment provider made for this attempt on its allocation; renews the lease.

    The body replaces the previous record (an empty body clears it). An attempt that holds no
    environment is ENVIRONMENT_UNAVAILABLE (reason `not_allocated`).
    """

    attempt_scope = "attempt"

    InputSerializer = ProvisionedSerializer

    class OutputSerializer(serializers.Serializer[Any]):
        environment = serializers.CharField(help_text="The allocated environment's name.")
        kind = serializers.CharField()
        provisioned = serializers.DictField(help_text="The record as stored.")
        changed = serializers.BooleanField(help_text="Whether this call changed the record.")
        lease_expires_at = serializers.DateTimeField()

    @extend_schema(
        operation_id="attempts_environment",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def put(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            recorded = attempt_record_environment(proof=proof, provisioned=data)
            allocation = recorded.allocation
            return MutationResult(
                status=200,
                data={
                    "environment": allocation.environment.name,
                    "kind": allocation.environment.kind,
                    "provisioned": allocation.provisioned,
                    "changed": recorded.changed,
                    "lease_expires_at": clock.iso(recorded.lease_expires_at),
                },
            )

        return run_mutation(request, work)
