"""Task endpoints: list (compact), create, read (full), update (If-Match). The work context and
long texts in ranges are `leases.apis.task_context`.

Thin doors (STYLE.md): parse the input, call the outermost service or
selector, render. Rules live in `ledger.services`, `leases.services` and
`leases.selectors`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django.db.models import F, Q, QuerySet
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    PageQuery,
    body_input,
    decode_cursor,
    encode_cursor,
    query_input,
)
from api.mutations import MutationResult, run_mutation
from api.schema import (
    ATTEMPT_ID_SCHEMA,
    IDEMPOTENCY_KEY,
    LEASE_EPOCH_SCHEMA,
    LEASE_TOKEN_SCHEMA,
    NON_BLANK_TEXT_PATTERN,
    READ_ERRORS,
    TEXT_PATTERN,
    WRITE_ERRORS,
    error_responses,
)
from core.errors import PermissionDenied, ValidationFailed
from leases.apis.fields import LabelSetField, TaskKeyField, budget_cost_field, budget_tokens_field, paths_field
from leases.apis.holder import holder_proof_from_headers, lease_headers_present
from leases.apis.projections import COMPACT_TASK_FIELDS
from leases.apis.serializers import CompactTaskPageSerializer, FullTaskSerializer
from leases.filters import TaskFilter
from leases.selectors import EFFECTIVE_STATUSES, full_task_read, with_compact_state
from leases.services import task_update
from ledger import clock
from ledger.models import PathsMode, Task, TaskStatus
from ledger.selectors import project_by_slug, task_by_key, tasks_visible_to
from ledger.services import INITIAL_STATUSES, task_create

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
IF_MATCH = re.compile(r'^\s*(?:W/)?"?([0-9]{1,10})"?\s*$')
SLUG_PATTERN = "^[-a-zA-Z0-9_]+$"


def _comma_separated(values: tuple[str, ...] | list[str]) -> str:
    one = "(?:" + "|".join(values) + ")"
    return f"^{one}(?:,{one})*$"


TASK_LIST_PARAMETERS = [
    OpenApiParameter(
        "project", {"type": "string", "maxLength": 50, "pattern": SLUG_PATTERN}, description="Project slug."
    ),
    OpenApiParameter(
        "status",
        {"type": "string", "pattern": _comma_separated(TaskStatus.values)},
        description="Stored status; several separated by commas.",
    ),
    OpenApiParameter(
        "effective_status",
        {"type": "string", "pattern": _comma_separated(EFFECTIVE_STATUSES)},
        description=f"One or more of {', '.join(EFFECTIVE_STATUSES)}, separated by commas.",
    ),
    OpenApiParameter("task_class", {"type": "string", "maxLength": 64, "pattern": TEXT_PATTERN}),
    OpenApiParameter(
        "requires",
        {"type": "string", "maxLength": 1300, "pattern": "^[a-z0-9][a-z0-9._-]*(?:,[a-z0-9][a-z0-9._-]*)*$"},
        description="Tasks that require every one of these labels (SPEC §23.1), separated by commas.",
    ),
    OpenApiParameter("claimable", str, enum=["true", "false"], description="Only (not) claimable tasks."),
    OpenApiParameter(
        "ready",
        str,
        enum=["true"],
        description="The ready view: claimable tasks only, in claim-next order (priority, then age).",
    ),
    OpenApiParameter(
        "q",
        {"type": "string", "maxLength": 200, "pattern": TEXT_PATTERN},
        description="Case-insensitive substring of the title.",
    ),
    OpenApiParameter(
        "cursor",
        {"type": "string", "minLength": 1, "maxLength": 300, "pattern": NON_BLANK_TEXT_PATTERN},
        description="`next_cursor` of the previous page.",
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
        description=f"Page size, 1-{MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE}).",
    ),
]


class ReadyQuery(PageQuery):
    ready = serializers.ChoiceField(choices=["true"], required=False)


class TaskListApi(ApiView):
    """Compact task list: never a description; cursor-paginated by creation order.

    `ready=true` is the ready view (SPEC §4, §16.3): claimable tasks in claim-next order.
    """

    @extend_schema(
        operation_id="tasks_list",
        parameters=TASK_LIST_PARAMETERS,
        responses={200: CompactTaskPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        caller = caller_of(request)
        page = query_input(ReadyQuery, request, also=TaskFilter.base_filters)
        now = clock.now()
        tasks = with_compact_state(tasks_visible_to(caller.agent), now=now, agent=caller.agent)
        filterset = TaskFilter(request.query_params, tasks, agent=caller.agent, now=now)
        if not filterset.is_valid():
            raise drf.ValidationError(filterset.errors)
        tasks = filterset.qs
        if page.get("ready"):
            return Response(ready_page(tasks, page))
        if "cursor" in page:
            tasks = tasks.filter(id__gt=decode_cursor(page["cursor"], expected={"after": int})["after"])
        rows = list(tasks.order_by("id").values(*COMPACT_TASK_FIELDS)[: page["limit"] + 1])
        more = len(rows) > page["limit"]
        rows = rows[: page["limit"]]
        next_cursor = encode_cursor({"after": rows[-1]["id"]}) if more else None
        return Response(CompactTaskPageSerializer({"results": rows, "next_cursor": next_cursor}).data)


READY_CURSOR = {"priority": int, "ready_since": str, "id": int}


def ready_page(tasks: QuerySet[Task], page: dict[str, Any]) -> dict[str, Any]:
    """Claimable tasks (the `claimable` column: `claimable_tasks`' rule) in claim-next order, keyset-paged."""
    tasks = tasks.filter(claimable=True)  # type: ignore[misc]  # annotated by with_compact_state
    if "cursor" in page:
        after = decode_cursor(page["cursor"], expected=READY_CURSOR)
        since = parse_datetime(after["ready_since"])
        if since is None:
            raise ValidationFailed("The cursor is not valid; use next_cursor as given.")
        tasks = tasks.filter(
            Q(priority__lt=after["priority"])
            | Q(priority=after["priority"], ready_since__gt=since)
            | Q(priority=after["priority"], ready_since=since, id__gt=after["id"])
        )
    ordered = tasks.order_by(F("priority").desc(), F("ready_since").asc(), "id")
    rows = list(ordered.values(*COMPACT_TASK_FIELDS, "ready_since")[: page["limit"] + 1])
    more = len(rows) > page["limit"]
    rows = rows[: page["limit"]]
    last = rows[-1] if more else None
    next_cursor = (
        encode_cursor({"priority": last["priority"], "ready_since": last["ready_since"].isoformat(), "id": last["id"]})
        if last is not None
        else None
    )
    return CompactTaskPageSerializer({"results": rows, "next_cursor": next_cursor}).data


class TaskCreateApi(ApiView):
    """Create a task; the server assigns its key. Answers the full task.

    A `blocked` task needs a non-blank `blocked_reason` (VALIDATION_ERROR otherwise); the
    reason is kept only for a blocked task. `blocked_by` names tasks you can see, of this
    project or another (SPEC §22).
    """

    user_permission = "ledger.add_task"

    class InputSerializer(serializers.Serializer[Any]):
        project = serializers.SlugField(max_length=50)
        title = serializers.CharField(max_length=300)
        description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        acceptance_criteria = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        status = serializers.ChoiceField(choices=sorted(INITIAL_STATUSES), required=False, default=TaskStatus.OPEN)
        blocked_reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)
        priority = serializers.IntegerField(required=False, default=0, min_value=INT32_MIN, max_value=INT32_MAX)
        task_class = serializers.SlugField(required=False, allow_blank=True, max_length=64, default="")
        labels = serializers.ListField(
            child=serializers.CharField(max_length=64), required=False, max_length=50, default=list
        )
        requires = LabelSetField(
            required=False, default=list, help_text='Labels a claimer must carry (SPEC §23.1), e.g. ["gpu"].'
        )
        blocked_by = serializers.ListField(
            child=TaskKeyField(max_length=24), required=False, max_length=100, default=list
        )
        budget_tokens = budget_tokens_field()
        budget_cost_usd = budget_cost_field()
        paths = paths_field("Repository paths its claims reserve unless a claim names its own.")
        paths_mode = serializers.ChoiceField(choices=PathsMode.values, required=False)

    @extend_schema(
        operation_id="tasks_create",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: FullTaskSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        slug = data.pop("project")
        keys = data.pop("blocked_by")
        caller = caller_of(request)

        def work() -> MutationResult:
            # Re-runnable: write_transaction may run it again after a lock timeout.
            project = project_by_slug(slug, agent=caller.agent)
            blockers = list(tasks_visible_to(caller.agent).filter(key__in=keys)) if keys else []
            missing = sorted(set(keys) - {blocker.key for blocker in blockers})
            if missing:
                raise ValidationFailed(
                    f"Unknown blockers: {', '.join(missing)}.", details={"fields": {"blocked_by": missing}}
                )
            task = task_create(project=project, actor=caller.actor, blocked_by=blockers, **data)
            return MutationResult(status=201, data=FullTaskSerializer(full_task_read(task, now=clock.now())).data)

        return run_mutation(request, work)


class TaskDetailApi(ApiView):
    """One task, full (with description and acceptance criteria); `ETag` is its version."""

    attempt_scope = "task"

    @extend_schema(
        operation_id="tasks_retrieve",
        responses={200: FullTaskSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, key: str) -> Response:
        task = full_task_read(task_by_key(key, agent=caller_of(request).agent), now=clock.now())
        return Response(FullTaskSerializer(task).data, headers={"ETag": f'"{task.version}"'})


def _expected_version(request: Request, body_version: int | None) -> int:
    header = request.META.get("HTTP_IF_MATCH")
    header_version = None
    if header is not None:
        match = IF_MATCH.match(header)
        if match is None:
            raise ValidationFailed(
                "If-Match must be the task's version, e.g. If-Match: 3.",
                details={"fields": {"If-Match": ["a task version"]}},
            )
        header_version = int(match.group(1))
    if header_version is not None and body_version is not None and header_version != body_version:
        raise ValidationFailed("If-Match and expected_version disagree; send one of them.")
    version = header_version if header_version is not None else body_version
    if version is None:
        raise ValidationFailed(
            "A task update needs If-Match: <version> (or expected_version in the body).",
            details={"fields": {"If-Match": ["required"]}},
        )
    return version


class TaskUpdateApi(ApiView):
    """Update with optimistic concurrency. With the X-Lease-* headers and the attempt id
    it is the holder's write and renews the lease; otherwise a plain (or contested) write.

    Rules across the headers and the body (VALIDATION_ERROR otherwise):

    - the version you read, as `If-Match` or as `expected_version`; when both are sent they agree;
    - at least one field to change besides `expected_version` and `attempt_id`;
    - a holder write sends `X-Lease-Token`, `X-Lease-Epoch` and the attempt, as `X-Attempt-Id`
      or `attempt_id` (both agree when both are sent); any one of them makes the request a
      holder write, which only an agent can make (PERMISSION_DENIED);
    - `status: blocked` needs a non-blank `blocked_reason`, sent or already stored; the status
      moves only along the transitions of SPEC §2 (INVALID_STATUS_TRANSITION).
    """

    user_permission = "ledger.change_task"

    class InputSerializer(serializers.Serializer[Any]):
        title = serializers.CharField(required=False, max_length=300)
        description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        acceptance_criteria = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        status = serializers.ChoiceField(choices=TaskStatus.values, required=False)
        blocked_reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)
        priority = serializers.IntegerField(required=False, min_value=INT32_MIN, max_value=INT32_MAX)
        task_class = serializers.SlugField(required=False, allow_blank=True, max_length=64)
        labels = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=50)
        requires = LabelSetField(required=False, help_text="Labels a claimer must carry (SPEC §23.1); [] for anyone.")
        budget_tokens = budget_tokens_field()
        budget_cost_usd = budget_cost_field()
        paths = paths_field("Repository paths its claims reserve unless a claim names its own.")
        paths_mode = serializers.ChoiceField(choices=PathsMode.values, required=False)
        expected_version = serializers.IntegerField(required=False, min_value=1, max_value=INT32_MAX)
        attempt_id = serializers.IntegerField(
            required=False, min_value=1, max_value=2**63 - 1, help_text="Your attempt, for a holder write."
        )

        # At least one field besides expected_version and attempt_id; the description says so.
        schema_rules: ClassVar[dict[str, Any]] = {"minProperties": 1}

    class OutputSerializer(FullTaskSerializer):
        changed = serializers.ListField(child=serializers.CharField(), help_text="Fields that changed.")

    @extend_schema(
        operation_id="tasks_partial_update",
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "If-Match",
                {"type": "string", "pattern": '^(?:W/)?"?[0-9]{1,10}"?$'},
                OpenApiParameter.HEADER,
                description='The version you read (or expected_version), e.g. `3` or `"3"`.',
            ),
            OpenApiParameter(
                "X-Lease-Token", LEASE_TOKEN_SCHEMA, OpenApiParameter.HEADER, description="Holder write only."
            ),
            OpenApiParameter(
                "X-Lease-Epoch", LEASE_EPOCH_SCHEMA, OpenApiParameter.HEADER, description="Holder write only."
            ),
            OpenApiParameter(
                "X-Attempt-Id", ATTEMPT_ID_SCHEMA, OpenApiParameter.HEADER, description="Holder write only."
            ),
            IDEMPOTENCY_KEY,
        ],
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def patch(self, request: Request, key: str) -> Response:
        data = body_input(self.InputSerializer, request)
        expected_version = _expected_version(request, data.pop("expected_version", None))
        body_attempt = data.pop("attempt_id", None)
        if not data:
            raise ValidationFailed("Give at least one field to change.")
        caller = caller_of(request)
        proof = None
        if lease_headers_present(request) or body_attempt is not None:
            if caller.agent is None:
                raise PermissionDenied("Only an agent can make a holder write.")
            proof = holder_proof_from_headers(request, attempt_id=_attempt_id(request, body_attempt))

        def work() -> MutationResult:
            task = task_by_key(key, agent=caller.agent)
            result = task_update(
                task=task, actor=caller.actor, changes=data, expected_version=expected_version, proof=proof
            )
            shown = full_task_read(result.task, now=clock.now())
            shown.changed = sorted(result.changed)  # type: ignore[attr-defined]
            return MutationResult(status=200, data=self.OutputSerializer(shown).data)

        return run_mutation(request, work)


def _attempt_id(request: Request, body_attempt: int | None) -> int:
    header = request.META.get("HTTP_X_ATTEMPT_ID")
    if header is None:
        if body_attempt is None:
            raise ValidationFailed(
                "A holder write names its attempt: X-Attempt-Id header or attempt_id in the body.",
                details={"fields": {"X-Attempt-Id": ["required with X-Lease-Token"]}},
            )
        return body_attempt
    if not re.fullmatch(r"[1-9][0-9]{0,17}", header):
        raise ValidationFailed("X-Attempt-Id must be an attempt id.", details={"fields": {"X-Attempt-Id": ["invalid"]}})
    if body_attempt is not None and body_attempt != int(header):
        raise ValidationFailed("X-Attempt-Id and attempt_id disagree.")
    return int(header)
