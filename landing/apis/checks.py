"""Check results from any CI (SPEC §22): report one; list those at a task's head."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, READ_ERRORS, WRITE_ERRORS, error_responses
from landing.services import CheckReport, check_report
from leases.models import CHECK_SUMMARY_MAX_CHARS, CHECK_URL_MAX_CHARS, CheckState
from leases.selectors.checks import check_row, checks_at, task_head
from ledger.selectors import project_by_slug, task_by_key


class CheckReportApi(ApiView):
    """Report the result of a check at a commit; the latest result per (project, commit, name) wins."""

    class InputSerializer(serializers.Serializer[Any]):
        project = serializers.SlugField(max_length=50)
        commit = serializers.RegexField(r"^[0-9a-f]{40}$", help_text="The full commit id (40 lowercase hex).")
        name = serializers.RegexField(r"^[a-z0-9][a-z0-9_.-]{0,99}$", help_text="The check's name, e.g. `lint`.")
        state = serializers.ChoiceField(choices=CheckState.values)
        url = serializers.CharField(required=False, default="", allow_blank=True, max_length=CHECK_URL_MAX_CHARS)
        summary = serializers.CharField(
            required=False, default="", allow_blank=True, trim_whitespace=False, max_length=CHECK_SUMMARY_MAX_CHARS
        )

    @extend_schema(
        operation_id="checks_report",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: OpenApiResponse(description="The stored result and the keys of the tasks it sent back."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        agent = caller_of(request).require_agent()
        report = CheckReport(
            commit=data["commit"], name=data["name"], state=data["state"], url=data["url"], summary=data["summary"]
        )

        def work() -> MutationResult:
            project = project_by_slug(data["project"], agent=agent)
            check, sent_back = check_report(project=project, agent=agent, report=report)
            return MutationResult(
                status=200, data={"project": project.slug, "check": check_row(check), "sent_back": sent_back}
            )

        return run_mutation(request, work)


class TaskChecksApi(ApiView):
    """The latest check results at the task's head (its delivered head once delivered)."""

    @extend_schema(
        operation_id="tasks_checks",
        responses={200: OpenApiResponse(description="task, head, results"), **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, key: str) -> Response:
        task = task_by_key(key, agent=caller_of(request).agent)
        head = task_head(task)
        results = [check_row(check) for check in checks_at(task.project_id, head)] if head else []
        required = list(task.project.required_checks or [])
        return Response({"task": task.key, "head": head, "required_checks": required, "results": results})
