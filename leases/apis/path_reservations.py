"""`GET /api/v1/reservations/?project=`: the project's live path reservations (SPEC §19)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import decode_cursor, encode_cursor, query_input
from api.schema import READ_ERRORS, error_responses
from leases.selectors import live_reservations
from ledger import clock
from ledger.models import PathsMode
from ledger.selectors import project_by_slug


class ReservationSerializer(serializers.Serializer[Any]):
    task = serializers.CharField(source="attempt__task__key", help_text="Task key.")
    attempt = serializers.IntegerField(source="attempt_id")
    holder = serializers.CharField(source="attempt__agent__handle")
    paths = serializers.ListField(child=serializers.CharField())
    mode = serializers.ChoiceField(choices=PathsMode.values)
    lease_expires_at = serializers.DateTimeField(source="attempt__lease_expires_at")


class ReservationListApi(ApiView):
    """Live reservations of a project, newest claim first: each lives exactly as long as its lease."""

    class FilterSerializer(serializers.Serializer[Any]):
        project = serializers.SlugField(max_length=50)
        cursor = serializers.CharField(required=False, max_length=300)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)

    class OutputSerializer(serializers.Serializer[Any]):
        results = ReservationSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="reservations_list",
        parameters=[FilterSerializer],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        params = query_input(self.FilterSerializer, request)
        project = project_by_slug(params["project"], agent=caller_of(request).agent)
        rows = live_reservations(project=project, now=clock.now())
        if "cursor" in params:
            rows = rows.filter(attempt_id__lt=decode_cursor(params["cursor"], expected={"before": int})["before"])
        limit = params["limit"]
        page = list(
            rows.values(
                "attempt_id",
                "attempt__task__key",
                "attempt__agent__handle",
                "paths",
                "mode",
                "attempt__lease_expires_at",
            )[: limit + 1]
        )
        more = len(page) > limit
        page = page[:limit]
        next_cursor = encode_cursor({"before": page[-1]["attempt_id"]}) if more else None
        return Response(self.OutputSerializer({"results": page, "next_cursor": next_cursor}).data)
