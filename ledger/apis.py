"""Ledger endpoints: projects, the changes feed, the run heartbeat."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import (
    MAX_PAGE_SIZE,
    Outcome,
    PageQuery,
    caller_of,
    decode_cursor,
    encode_cursor,
    query_input,
    run_mutation,
)
from ledger.api_base import ApiView
from ledger.api_schema import IDEMPOTENCY_KEY, READ_ERRORS, error_responses
from ledger.api_selectors import changes_since, projects_for
from ledger.models import Isolation, Severity
from ledger.selectors import project_by_slug
from ledger.services import agent_heartbeat

BIGINT_MAX = 2**63 - 1


def _iso(moment: Any) -> str | None:
    if moment is None:
        return None
    text = str(moment.isoformat())
    return text[:-6] + "Z" if text.endswith("+00:00") else text


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
        projects = projects_for(caller_of(request).agent).order_by("slug")
        if "cursor" in page:
            projects = projects.filter(slug__gt=decode_cursor(page["cursor"], expected={"after": str})["after"])
        rows = list(projects[: page["limit"] + 1])
        more = len(rows) > page["limit"]
        rows = rows[: page["limit"]]
        return Response(
            {
                "results": [
                    {
                        "slug": project.slug,
                        "name": project.name,
                        "key_prefix": project.key_prefix,
                        "repository": project.repository,
                        "default_branch": project.default_branch,
                        "default_lease_seconds": project.default_lease_seconds,
                        "queue_wait_max_seconds": project.queue_wait_max_seconds,
                        "required_isolation": project.required_isolation,
                        "archived_at": _iso(project.archived_at),
                    }
                    for project in rows
                ],
                "next_cursor": encode_cursor({"after": rows[-1].slug}) if more else None,
            }
        )


class ChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    type = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.values)
    task = serializers.CharField(allow_null=True, help_text="Task key.")
    attempt = serializers.IntegerField(allow_null=True)
    actor = serializers.CharField(help_text="Agent handle, `user:<name>`, or `system`.")
    payload = serializers.DictField()
    created_at = serializers.DateTimeField()


class ChangesApi(ApiView):
    """Delta feed: events with id > since, ascending, one sequence for every event type.

    Pass `latest_event_id` back as `since`; it is the last event returned, or
    `since` itself when nothing is new.
    """

    class FilterSerializer(serializers.Serializer[Any]):
        since = serializers.IntegerField(required=False, min_value=0, max_value=BIGINT_MAX, default=0)
        project = serializers.SlugField(required=False, max_length=50)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=100)

    class OutputSerializer(serializers.Serializer[Any]):
        events = ChangeSerializer(many=True)
        latest_event_id = serializers.IntegerField()
        has_more = serializers.BooleanField()

    @extend_schema(
        operation_id="changes_list",
        parameters=[FilterSerializer],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        params = query_input(self.FilterSerializer, request)
        agent = caller_of(request).agent
        project = project_by_slug(params["project"], agent=agent) if "project" in params else None
        rows, more = changes_since(agent=agent, since=params["since"], limit=params["limit"], project=project)
        events = [
            {
                "id": row["id"],
                "type": row["type"],
                "severity": row["severity"],
                "task": row["task__key"],
                "attempt": row["attempt_id"],
                "actor": row["actor_agent__handle"]
                or (f"user:{row['actor_user__username']}" if row["actor_user__username"] else "system"),
                "payload": row["payload"],
                "created_at": _iso(row["created_at"]),
            }
            for row in rows
        ]
        return Response(
            {
                "events": events,
                "latest_event_id": events[-1]["id"] if events else params["since"],
                "has_more": more,
            }
        )


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

        def work() -> Outcome:
            return Outcome(status=200, data={"agent": agent.handle, "seen_at": _iso(agent_heartbeat(agent=agent))})

        return run_mutation(request, work)
