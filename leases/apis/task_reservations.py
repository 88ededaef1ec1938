"""Clearing a task's reservation (`Task.reserved_for`, not a path reservation): `POST /tasks/{key}/reservation/clear/`.

A reservation is set by an admin's reassign (only that agent may claim the
task). Clearing it lets every agent of the project claim the task again. A
staff user with the change permission may clear any reservation; an agent
only its own (giving it up); anyone else is PERMISSION_DENIED. A task with
no reservation is answered as it is. The rule lives in
`ledger.services.task_reservation_clear`; the answer is the task's full view.
"""

from __future__ import annotations

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
from core.errors import PermissionDenied
from leases.apis.serializers import FullTaskSerializer
from leases.selectors import full_task_read
from ledger import clock
from ledger.selectors import task_by_key
from ledger.services import task_reservation_clear
from ledger.services.task_reservations import REASON_MAX_CHARS


class TaskReservationClearApi(ApiView):
    """Let every agent of the project claim this task again (ends an admin's reservation)."""

    user_permission = "ledger.change_task"

    class InputSerializer(serializers.Serializer[Any]):
        reason = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=REASON_MAX_CHARS,
            default="",
            help_text="Why; recorded in the task.reservation_cleared event.",
        )

    OutputSerializer = FullTaskSerializer

    @extend_schema(
        operation_id="tasks_reservation_clear",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, key: str) -> Response:
        data = body_input(self.InputSerializer, request)
        caller = caller_of(request)

        def work() -> MutationResult:
            task = task_by_key(key, agent=caller.agent)
            if caller.agent is not None and task.reserved_for_id not in (None, caller.agent.pk):
                raise PermissionDenied("An agent may clear only its own reservation.")
            cleared = task_reservation_clear(task=task, actor=caller.actor, reason=data["reason"])
            return MutationResult(status=200, data=FullTaskSerializer(full_task_read(cleared, now=clock.now())).data)

        return run_mutation(request, work)
