"""What an agent reads to work on a task beyond its full read: the bounded work context (SPEC §8)
and, in ranges, the long texts the context cut.

Thin doors (STYLE.md): the context is `leases.context.work_context`, the texts
`ledger.selectors.task_text`.
"""

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
from leases.apis.serializers import WorkContextSerializer
from leases.apis.tasks import INT32_MAX
from leases.context import work_context
from ledger import clock
from ledger.selectors import TASK_TEXT_FIELDS, task_by_key, task_text

TEXT_LIMIT_DEFAULT = 4000
TEXT_LIMIT_MAX = 16000


class TaskContextApi(ApiView):
    """The bounded work context: what an agent reads before (and while) working on a task."""

    attempt_scope = "task"

    @extend_schema(
        operation_id="tasks_context",
        responses={200: WorkContextSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, key: str) -> Response:
        task = task_by_key(key, agent=caller_of(request).agent)
        return Response(WorkContextSerializer(work_context(task=task, now=clock.now())).data)


class TaskTextQuery(serializers.Serializer[Any]):
    field = serializers.ChoiceField(choices=list(TASK_TEXT_FIELDS), required=False, default="description")
    offset = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=INT32_MAX - 1, help_text="In characters, from 0."
    )
    limit = serializers.IntegerField(
        required=False,
        default=TEXT_LIMIT_DEFAULT,
        min_value=1,
        max_value=TEXT_LIMIT_MAX,
        help_text=f"Characters to read, 1-{TEXT_LIMIT_MAX} (default {TEXT_LIMIT_DEFAULT}).",
    )


class TaskTextApi(ApiView):
    """A range of the task's description or acceptance criteria: read what the work context cut."""

    attempt_scope = "task"

    class OutputSerializer(serializers.Serializer[Any]):
        key = serializers.CharField()
        field = serializers.ChoiceField(choices=list(TASK_TEXT_FIELDS))
        offset = serializers.IntegerField()
        length = serializers.IntegerField(help_text="The whole text's length in characters.")
        text = serializers.CharField(allow_blank=True, help_text="Empty beyond the end.")
        more = serializers.BooleanField(help_text="Text remains after this range.")

    @extend_schema(
        operation_id="tasks_text",
        parameters=[TaskTextQuery],
        responses={200: OutputSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, key: str) -> Response:
        query = query_input(TaskTextQuery, request)
        text = task_text(key, agent=caller_of(request).agent, **query)
        return Response(self.OutputSerializer(text).data)
