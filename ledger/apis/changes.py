"""`GET /api/v1/changes/`: the delta feed of events, one sequence for every event type."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import MAX_PAGE_SIZE, query_input
from api.schema import READ_ERRORS, error_responses
from ledger import clock
from ledger.models import Severity
from ledger.selectors import changes_since, project_by_slug

BIGINT_MAX = 2**63 - 1


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
                "created_at": clock.iso(row["created_at"]),
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
