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
from ledger.models import Severity
from ledger.selectors import changes_since, project_by_slug

BIGINT_MAX = 2**63 - 1


class ActorField(serializers.CharField):
    """Who wrote the event, from its row: the agent's handle, `user:<name>`, or `system`."""

    def get_attribute(self, instance: Any) -> str:
        if instance["actor_agent__handle"]:
            return str(instance["actor_agent__handle"])
        return f"user:{instance['actor_user__username']}" if instance["actor_user__username"] else "system"


# Reads a row of `ledger.selectors.changes_since`.
class ChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    type = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.values)
    task = serializers.CharField(source="task__key", allow_null=True, help_text="Task key.")
    attempt = serializers.IntegerField(source="attempt_id", allow_null=True)
    actor = ActorField(help_text="Agent handle, `user:<name>`, or `system`.")
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
        latest_event_id = rows[-1]["id"] if rows else params["since"]
        return Response(
            self.OutputSerializer({"events": rows, "latest_event_id": latest_event_id, "has_more": more}).data
        )
