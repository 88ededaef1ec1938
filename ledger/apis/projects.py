"""`GET /api/v1/projects/`: the projects the caller can see."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import PageQuery, decode_cursor, encode_cursor, query_input
from api.schema import READ_ERRORS, error_responses
from ledger.models import Isolation
from ledger.selectors import projects_visible_to


class ProjectSerializer(serializers.Serializer[Any]):
    slug = serializers.SlugField()
    name = serializers.CharField()
    key_prefix = serializers.CharField()
    repository = serializers.CharField(allow_blank=True)
    default_branch = serializers.CharField()
    default_lease_seconds = serializers.IntegerField()
    queue_wait_max_seconds = serializers.IntegerField()
    required_isolation = serializers.ChoiceField(choices=Isolation.values)
    archived_at = serializers.DateTimeField(allow_null=True)


class ProjectListApi(ApiView):
    """The projects the caller can see (an agent: its own; staff: all), by slug."""

    class OutputSerializer(serializers.Serializer[Any]):
        results = ProjectSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="projects_list",
        parameters=[PageQuery],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        page = query_input(PageQuery, request)
        projects = projects_visible_to(caller_of(request).agent).order_by("slug")
        if "cursor" in page:
            projects = projects.filter(slug__gt=decode_cursor(page["cursor"], expected={"after": str})["after"])
        rows = list(projects[: page["limit"] + 1])
        more = len(rows) > page["limit"]
        rows = rows[: page["limit"]]
        next_cursor = encode_cursor({"after": rows[-1].slug}) if more else None
        return Response(self.OutputSerializer({"results": rows, "next_cursor": next_cursor}).data)
