"""`GET /api/v1/metrics/`: fleet metrics per UTC day, over the caller's projects (SPEC §7)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import query_input
from api.schema import READ_ERRORS, error_responses
from insight.metrics import DEFAULT_DAYS, MAX_DAYS, fleet_metrics
from ledger.selectors import project_by_slug


class NumberField(serializers.FloatField):
    """A JSON number as the series holds it: a count stays an integer, a ratio a float."""

    def to_representation(self, value: Any) -> Any:
        return value


# Reads the series of `insight.metrics` (each day already a "YYYY-MM-DD" string).
class DayValueSerializer(serializers.Serializer[Any]):
    day = serializers.DateField()
    value = NumberField()


class OrphanRateDaySerializer(DayValueSerializer):
    orphans = serializers.IntegerField()
    finished = serializers.IntegerField()


class MetricsApi(ApiView):
    """Claims, lease conflicts (refused as taken + contested writes) and orphan rate, per UTC day.

    The same series as the admin dashboard (`insight.metrics`), oldest day first, zero-filled.
    """

    class FilterSerializer(serializers.Serializer[Any]):
        days = serializers.IntegerField(required=False, min_value=1, max_value=MAX_DAYS, default=DEFAULT_DAYS)
        project = serializers.SlugField(required=False, max_length=50)

    class OutputSerializer(serializers.Serializer[Any]):
        days = serializers.IntegerField()
        claims = DayValueSerializer(many=True)
        lease_conflicts = DayValueSerializer(many=True)
        orphan_rate = OrphanRateDaySerializer(many=True)

    @extend_schema(
        operation_id="metrics",
        parameters=[FilterSerializer],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        params = query_input(self.FilterSerializer, request)
        agent = caller_of(request).agent
        project = project_by_slug(params["project"], agent=agent) if "project" in params else None
        metrics = fleet_metrics(days=params["days"], project=project, visible_to=agent)
        return Response(self.OutputSerializer(metrics).data)
