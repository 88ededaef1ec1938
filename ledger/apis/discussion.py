"""Decisions and task comments (SPEC §16.2): create, list (compact, cursor pages), supersede.

Lists carry no body beyond a 300-character excerpt; one decision reads whole. Bounds are the
services' (`ledger.services.discussion`): longer input is VALIDATION_ERROR, never cut.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import PageQuery, body_input, decode_cursor, encode_cursor, query_input
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, NON_BLANK_TEXT_PATTERN, READ_ERRORS, WRITE_ERRORS, error_responses
from ledger import clock
from ledger.models import (
    COMMENT_BODY_MAX_CHARS,
    DECISION_BODY_MAX_CHARS,
    DECISION_TITLE_MAX_CHARS,
    Decision,
    DecisionStatus,
    TaskComment,
)
from ledger.selectors import decision_by_id, decisions_visible_to, project_by_slug, task_by_key
from ledger.services import comment_add, decision_create, decision_supersede

EXCERPT_CHARS = 300
SLUG_PATTERN = "^[-a-zA-Z0-9_]+$"
TASK_KEY_PATTERN = "^[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}$"
CURSOR_PARAMETERS = [
    OpenApiParameter("cursor", {"type": "string", "minLength": 1, "maxLength": 300, "pattern": NON_BLANK_TEXT_PATTERN}),
    OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
]


def decision_item(decision: Decision, *, whole: bool = False) -> dict[str, Any]:
    return {
        "id": decision.pk,
        "project": decision.project.slug,
        "task": decision.task.key if decision.task is not None else None,
        "title": decision.title,
        "body": decision.body if whole else decision.body[:EXCERPT_CHARS],
        "status": decision.status,
        "superseded_by": decision.superseded_by_id,
        "author": decision.author_label,
        "created_at": clock.iso(decision.created_at),
    }


def comment_item(comment: TaskComment, *, whole: bool = False) -> dict[str, Any]:
    return {
        "id": comment.pk,
        "task": comment.task.key,
        "author": comment.author_label,
        "body": comment.body if whole else comment.body[:EXCERPT_CHARS],
        "length": len(comment.body),
        "created_at": clock.iso(comment.created_at),
    }


class DecisionSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    project = serializers.CharField()
    task = serializers.CharField(allow_null=True)
    title = serializers.CharField()
    body = serializers.CharField(allow_blank=True, help_text="In lists, at most 300 characters.")
    status = serializers.ChoiceField(choices=DecisionStatus.values)
    superseded_by = serializers.IntegerField(allow_null=True)
    author = serializers.CharField()
    created_at = serializers.DateTimeField()


class DecisionPageSerializer(serializers.Serializer[Any]):
    results = DecisionSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class CommentSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    task = serializers.CharField()
    author = serializers.CharField()
    body = serializers.CharField(help_text="In lists, at most 300 characters.")
    length = serializers.IntegerField(help_text="The whole body's length in characters.")
    created_at = serializers.DateTimeField()


class CommentPageSerializer(serializers.Serializer[Any]):
    results = CommentSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


def _page(rows: list[Any], limit: int, render: Any) -> dict[str, Any]:
    more = len(rows) > limit
    rows = rows[:limit]
    return {
        "results": [render(row) for row in rows],
        "next_cursor": encode_cursor({"before": rows[-1].pk}) if more else None,
    }


class DecisionListQuery(PageQuery):
    project = serializers.SlugField(required=False, max_length=50)
    task = serializers.RegexField(TASK_KEY_PATTERN, required=False, max_length=24)
    status = serializers.ChoiceField(choices=DecisionStatus.values, required=False)


class DecisionListApi(ApiView):
    """Decisions, newest first (compact: bodies cut to 300 characters); filter by project, task, status."""

    @extend_schema(
        operation_id="decisions_list",
        parameters=[
            OpenApiParameter("project", {"type": "string", "maxLength": 50, "pattern": SLUG_PATTERN}),
            OpenApiParameter("task", {"type": "string", "pattern": TASK_KEY_PATTERN}),
            OpenApiParameter("status", str, enum=DecisionStatus.values),
            *CURSOR_PARAMETERS,
        ],
        responses={200: DecisionPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        agent = caller_of(request).agent
        query = query_input(DecisionListQuery, request)
        decisions = decisions_visible_to(agent).select_related("project", "task", "author_agent", "author_user")
        if "project" in query:
            decisions = decisions.filter(project=project_by_slug(query["project"], agent=agent))
        if "task" in query:
            decisions = decisions.filter(task=task_by_key(query["task"], agent=agent))
        if "status" in query:
            decisions = decisions.filter(status=query["status"])
        if "cursor" in query:
            decisions = decisions.filter(id__lt=decode_cursor(query["cursor"], expected={"before": int})["before"])
        rows = list(decisions.order_by("-id")[: query["limit"] + 1])
        return Response(_page(rows, query["limit"], decision_item))


class DecisionCreateApi(ApiView):
    """Record a decision of a project (optionally about one task). Title ≤ 200, body ≤ 4,000 characters."""

    user_permission = "ledger.add_decision"

    class InputSerializer(serializers.Serializer[Any]):
        project = serializers.SlugField(max_length=50)
        task = serializers.RegexField(TASK_KEY_PATTERN, required=False, max_length=24)
        title = serializers.CharField(max_length=DECISION_TITLE_MAX_CHARS)
        body = serializers.CharField(
            required=False, allow_blank=True, trim_whitespace=False, max_length=DECISION_BODY_MAX_CHARS, default=""
        )

    @extend_schema(
        operation_id="decisions_create",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: DecisionSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        caller = caller_of(request)

        def work() -> MutationResult:
            project = project_by_slug(data["project"], agent=caller.agent)
            task = task_by_key(data["task"], agent=caller.agent) if "task" in data else None
            decision = decision_create(
                project=project, task=task, title=data["title"], body=data["body"], actor=caller.actor
            )
            return MutationResult(status=201, data=decision_item(decision, whole=True))

        return run_mutation(request, work)


class DecisionDetailApi(ApiView):
    """One decision, whole."""

    @extend_schema(
        operation_id="decisions_retrieve", responses={200: DecisionSerializer, **error_responses(*READ_ERRORS)}
    )
    def get(self, request: Request, decision_id: int) -> Response:
        return Response(decision_item(decision_by_id(decision_id, agent=caller_of(request).agent), whole=True))


class DecisionSupersedeApi(ApiView):
    """Mark this decision superseded by another active decision of its project."""

    user_permission = "ledger.change_decision"

    class InputSerializer(serializers.Serializer[Any]):
        by = serializers.IntegerField(min_value=1, max_value=2**63 - 1, help_text="The decision that replaces it.")

    @extend_schema(
        operation_id="decisions_supersede",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={200: DecisionSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, decision_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        caller = caller_of(request)

        def work() -> MutationResult:
            decision = decision_by_id(decision_id, agent=caller.agent)
            by = decision_by_id(data["by"], agent=caller.agent)
            return MutationResult(
                status=200, data=decision_item(decision_supersede(decision=decision, by=by, actor=caller.actor))
            )

        return run_mutation(request, work)


class TaskCommentListApi(ApiView):
    """The task's comments, newest first (compact: bodies cut to 300 characters)."""

    attempt_scope = "task"

    @extend_schema(
        operation_id="tasks_comments_list",
        parameters=CURSOR_PARAMETERS,
        responses={200: CommentPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, key: str) -> Response:
        query = query_input(PageQuery, request)
        task = task_by_key(key, agent=caller_of(request).agent)
        comments = TaskComment.objects.filter(task=task).select_related("task", "author_agent", "author_user")
        if "cursor" in query:
            comments = comments.filter(id__lt=decode_cursor(query["cursor"], expected={"before": int})["before"])
        rows = list(comments.order_by("-id")[: query["limit"] + 1])
        return Response(_page(rows, query["limit"], comment_item))


class TaskCommentCreateApi(ApiView):
    """Comment on the task (≤ 8,000 characters). The holder of a live lease sees the count in its renewals."""

    user_permission = "ledger.add_taskcomment"

    class InputSerializer(serializers.Serializer[Any]):
        body = serializers.CharField(trim_whitespace=False, max_length=COMMENT_BODY_MAX_CHARS)

    @extend_schema(
        operation_id="tasks_comments_create",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: CommentSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, key: str) -> Response:
        data = body_input(self.InputSerializer, request)
        caller = caller_of(request)

        def work() -> MutationResult:
            task = task_by_key(key, agent=caller.agent)
            comment = comment_add(task=task, body=data["body"], actor=caller.actor)
            return MutationResult(status=201, data=comment_item(comment, whole=True))

        return run_mutation(request, work)
