"""`POST /api/v1/agents/me/heartbeat/`: the run heartbeat."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, error_responses
from ledger.services import agent_heartbeat


class AgentHeartbeatApi(ApiView):
    """The run heartbeat: the agent process is alive. Touches no lease (`last_seen_at`, ≤ 1 write / 30 s)."""

    class OutputSerializer(serializers.Serializer[Any]):
        agent = serializers.CharField()
        seen_at = serializers.DateTimeField()

    @extend_schema(
        operation_id="agents_me_heartbeat",
        request=None,
        parameters=[IDEMPOTENCY_KEY],
        responses={200: OutputSerializer, **error_responses(400, 401, 403, 409, 413, 415, 503)},
    )
    def post(self, request: Request) -> Response:
        agent = caller_of(request).require_agent()

        def work() -> MutationResult:
            seen_at = agent_heartbeat(agent=agent)
            return MutationResult(
                status=200, data=self.OutputSerializer({"agent": agent.handle, "seen_at": seen_at}).data
            )

        return run_mutation(request, work)
