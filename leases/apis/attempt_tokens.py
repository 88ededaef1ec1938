"""`POST /attempts/{id}/token/`: the holder mints the attempt token for the command it starts (SPEC §23.2).

Not in any attempt token's scope: a command cannot mint itself another. Not
replayed under an Idempotency-Key (the answer holds a secret, which the
idempotency table never stores): a retry mints a fresh token and the one
nobody received is dead.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiView
from api.inputs import body_input
from api.schema import HOLDER_HEADERS, WRITE_ERRORS, error_responses
from leases.apis.holder import holder_proof_from_headers
from leases.services import attempt_mint_token


class AttemptTokenMintApi(ApiView):
    """A credential for this attempt's own calls only, for the command its holder starts; it replaces the last."""

    class InputSerializer(serializers.Serializer[Any]):
        pass

    class OutputSerializer(serializers.Serializer[Any]):
        attempt = serializers.IntegerField()
        attempt_token = serializers.CharField(
            help_text="`LEASEHOLD_ATTEMPT_TOKEN`: a bearer token good for this attempt's notes, git facts, "
            "renew, finish, release, and reads of its task's context, text and comments; dead when the "
            "attempt ends. Shown once."
        )

    @extend_schema(
        operation_id="attempts_token",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={201: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)
        token = attempt_mint_token(proof=proof)
        response = Response(self.OutputSerializer({"attempt": attempt_id, "attempt_token": token}).data, status=201)
        response["Cache-Control"] = "no-store"
        return response
