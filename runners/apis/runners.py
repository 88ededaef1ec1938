"""The runner's own endpoints (SPEC §23.1): register on start, heartbeat every 15 s.

Only a runner token (`lhr_…`) is accepted here (`runner_scope`), and a runner token is accepted
nowhere else; slot work (claims, renewals, notes, finishes) uses the slot agents' tokens that the
registration returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import RunnerPrincipal
from api.base import ApiView
from api.inputs import body_input, refuse_unknown
from api.schema import error_responses
from ledger.actors import SYSTEM
from runners.models import HOST_MAX_CHARS, MAX_SLOTS, VERSION_MAX_CHARS, Runner, SlotState
from runners.services import HEARTBEAT_SECONDS, SlotReport, runner_heartbeat, runner_register
from runners.services.heartbeats import ATTEMPT_ID_MAX, TASK_KEY_MAX_CHARS
from runners.services.registering import PID_MAX

RUNNER_ERRORS = (400, 401, 403, 413, 415, 429, 503)


def _runner_of(request: Request) -> Runner:
    principal = request.user
    assert isinstance(principal, RunnerPrincipal)  # runner_scope: IsAgentOrStaff let only a runner in
    return principal.runner


class RegisteredRunnerSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    labels = serializers.ListField(child=serializers.CharField())
    projects = serializers.ListField(child=serializers.CharField(), help_text="Project slugs.")
    slots = serializers.IntegerField()
    cordoned = serializers.BooleanField()
    draining = serializers.BooleanField()
    heartbeat_seconds = serializers.IntegerField()


class SlotCredentialSerializer(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    agent = serializers.CharField(help_text="The slot agent's handle, `NAME.N`.")
    token = serializers.CharField(help_text="The slot agent's API token, shown once.")


class HandedOffSerializer(serializers.Serializer[Any]):
    attempt_id = serializers.IntegerField()
    task = serializers.CharField()


class RunnerRegisterApi(ApiView):
    """Register the (re)started runner: fresh tokens for its slot agents (the previous ones stop working),
    and every attempt its slots held before handed off at once (`runner_restart`)."""

    runner_scope: ClassVar[bool] = True

    class InputSerializer(serializers.Serializer[Any]):
        host = serializers.CharField(max_length=HOST_MAX_CHARS, allow_blank=True, help_text="The machine's name.")
        version = serializers.CharField(max_length=VERSION_MAX_CHARS, allow_blank=True, help_text="The runner's.")
        pid = serializers.IntegerField(min_value=0, max_value=PID_MAX, help_text="The daemon's process id.")

    class OutputSerializer(serializers.Serializer[Any]):
        # For the schema alone: the view answers a plain dict.
        runner = RegisteredRunnerSerializer()
        slots = SlotCredentialSerializer(many=True)
        handed_off = HandedOffSerializer(many=True)

    @extend_schema(
        operation_id="runners_register",
        request=InputSerializer,
        responses={
            201: OutputSerializer,
            **error_responses(*RUNNER_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        registration = runner_register(
            runner=_runner_of(request), host=data["host"], version=data["version"], pid=data["pid"], actor=SYSTEM
        )
        runner = registration.runner
        body = {
            "runner": {
                "name": runner.name,
                "labels": list(runner.labels),
                "projects": sorted(runner.projects.values_list("slug", flat=True)),
                "slots": runner.slots,
                "cordoned": runner.cordoned_at is not None,
                "draining": runner.draining_at is not None,
                "heartbeat_seconds": HEARTBEAT_SECONDS,
            },
            "slots": [{"number": slot.number, "agent": slot.agent, "token": slot.token} for slot in registration.slots],
            "handed_off": [{"attempt_id": item.attempt_id, "task": item.task} for item in registration.handed_off],
        }
        return Response(body, status=201)


class SlotReportSerializer(serializers.Serializer[Any]):
    number = serializers.IntegerField(min_value=1, max_value=MAX_SLOTS)
    state = serializers.ChoiceField(choices=SlotState.values)
    attempt_id = serializers.IntegerField(min_value=1, max_value=ATTEMPT_ID_MAX, allow_null=True, required=False)
    task = serializers.CharField(max_length=TASK_KEY_MAX_CHARS, allow_null=True, required=False, allow_blank=True)

    def to_internal_value(self, data: Any) -> Any:
        # No input is silently ignored, inside the list too.
        if isinstance(data, Mapping):
            refuse_unknown(data, self.fields, where="slot")
        return super().to_internal_value(data)


class RunnerHeartbeatApi(ApiView):
    """Report each slot's state; the answer says whether the runner is cordoned or draining and which
    attempts the console cancelled (stop their commands now)."""

    runner_scope: ClassVar[bool] = True

    class InputSerializer(serializers.Serializer[Any]):
        slots = serializers.ListField(child=SlotReportSerializer(), max_length=MAX_SLOTS, allow_empty=True)

    class OutputSerializer(serializers.Serializer[Any]):
        cordoned = serializers.BooleanField()
        draining = serializers.BooleanField()
        cancel = serializers.ListField(child=serializers.IntegerField(), help_text="Attempt ids to stop now.")
        heartbeat_seconds = serializers.IntegerField()

    @extend_schema(
        operation_id="runners_heartbeat",
        request=InputSerializer,
        responses={200: OutputSerializer, **error_responses(*RUNNER_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        reports = [
            SlotReport(
                number=item["number"], state=item["state"], attempt_id=item.get("attempt_id"), task=item.get("task")
            )
            for item in data["slots"]
        ]
        answer = runner_heartbeat(runner=_runner_of(request), slots=reports)
        return Response(
            {
                "cordoned": answer.cordoned,
                "draining": answer.draining,
                "cancel": answer.cancel,
                "heartbeat_seconds": answer.heartbeat_seconds,
            }
        )
