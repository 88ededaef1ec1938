"""`GET /api/v1/projects/`: the projects the caller can see; `GET /api/v1/projects/{slug}/`: one, with its progress."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import PageQuery, decode_cursor, encode_cursor, query_input
from api.schema import READ_ERRORS, error_responses
from ledger.apis.discussion import SLUG_PATTERN
from ledger.models import Isolation
from ledger.selectors import UNFINISHED_STATUSES, project_by_slug, project_progress, projects_visible_to


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


class ProgressSerializer(serializers.Serializer[Any]):
    tasks = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Tasks per stored status: open, ready (claimable, held or waiting on a blocker), review, "
        "delivered, blocked.",
    )
    finished = serializers.BooleanField(
        help_text=f"No task is {', '.join(UNFINISHED_STATUSES)}: what `leasehold run --until-empty` waits for."
    )


class ProjectDetailQuery(serializers.Serializer[Any]):
    task_class = serializers.SlugField(required=False, max_length=64)


class ProjectDetailApi(ApiView):
    """One project and its progress: how many tasks are not finished yet (SPEC §25, `--until-empty`)."""

    class OutputSerializer(ProjectSerializer):
        progress = ProgressSerializer()

    @extend_schema(
        operation_id="projects_read",
        parameters=[
            OpenApiParameter(
                "task_class",
                {"type": "string", "maxLength": 64, "pattern": SLUG_PATTERN},
                description="Count only the tasks of this class.",
            ),
        ],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, slug: str) -> Response:
        query = query_input(ProjectDetailQuery, request)
        project = project_by_slug(slug, agent=caller_of(request).agent)
        progress = project_progress(project, task_class=query.get("task_class"))
        return Response(self.OutputSerializer({**ProjectSerializer(project).data, "progress": progress}).data)
