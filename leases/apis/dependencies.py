"""Task dependencies: add one, remove one (SPEC §16.3): the row stays, with `removed_at`.

Both tasks must be visible to the caller (else NOT_FOUND, for either); a
cycle is DEPENDENCY_CYCLE with its path. The rules live in
`ledger.services.dependency_add` / `dependency_remove`; the answer is the
task's full view, as `GET /tasks/{key}/`. Adding a present dependency and
removing an absent one change nothing and answer the same view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, WRITE_ERRORS, error_responses
from leases.apis.serializers import FullTaskSerializer
from leases.selectors import full_task_read
from ledger import clock
from ledger.selectors import task_by_key
from ledger.services import dependency_add, dependency_remove


class DependencyInputSerializer(serializers.Serializer[Any]):
    blocked_by = serializers.CharField(max_length=24, help_text="Key of the task this one waits for.")


def _change_dependency(request: Request, key: str, change: Callable[..., Any]) -> Response:
    data = body_input(DependencyInputSerializer, request)
    caller = caller_of(request)

    def work() -> MutationResult:
        task = task_by_key(key, agent=caller.agent)
        blocked_by = task_by_key(data["blocked_by"], agent=caller.agent)
        change(task=task, blocked_by=blocked_by, actor=caller.actor)
        return MutationResult(status=200, data=FullTaskSerializer(full_task_read(task, now=clock.now())).data)

    return run_mutation(request, work)


class TaskDependencyAddApi(ApiView):
    """Make this task wait for another task of its project; a cycle is refused with its path."""

    user_permission = "ledger.change_task"
    InputSerializer = DependencyInputSerializer
    OutputSerializer = FullTaskSerializer

    @extend_schema(
        operation_id="tasks_dependencies_add",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, key: str) -> Response:
        return _change_dependency(request, key, dependency_add)


class TaskDependencyRemoveApi(ApiView):
    """End this task's dependency on another: `removed_at` is set, the row stays."""

    user_permission = "ledger.change_task"
    InputSerializer = DependencyInputSerializer
    OutputSerializer = FullTaskSerializer

    @extend_schema(
        operation_id="tasks_dependencies_remove",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, key: str) -> Response:
        return _change_dependency(request, key, dependency_remove)
