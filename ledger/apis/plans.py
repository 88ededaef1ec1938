"""Plans (SPEC §17): `POST /plans/` files many tasks, their dependencies and decisions in one call.

The door checks the shape of every task and decision (types, lengths,
choices, unknown fields) and reports every problem at once, each with its
path (`tasks[3].title`) and the task's ref; the plan's own rules (refs,
blockers, limits, cycles, the creation rules) are `ledger.services.plans`'.

`?dry_run=true` checks the whole plan, including the keys it names, and
answers 200 with what it would create, writing nothing; a real run answers
201 with the new keys by ref. Both are idempotent under `Idempotency-Key`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.request import Request

from api.auth import caller_of
from api.base import ApiView
from api.inputs import query_input, refuse_unknown
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, WRITE_ERRORS, error_responses
from core.errors import PermissionDenied, ValidationFailed
from ledger.models import DECISION_BODY_MAX_CHARS, DECISION_TITLE_MAX_CHARS, TaskStatus
from ledger.selectors import project_by_slug
from ledger.services import (
    INITIAL_STATUSES,
    MAX_PLAN_DECISIONS,
    MAX_PLAN_TASKS,
    PlannedDecision,
    PlannedTask,
    plan_apply,
    plan_check,
)
from ledger.services.plans import MAX_PLAN_EDGES, REF_PATTERN, PlanProblem, plan_refused

DECISION_PERMISSION = "ledger.add_decision"

INT32 = 2**31 - 1
ENTRY_MAX_CHARS = 64


class PlanTaskSerializer(serializers.Serializer[Any]):
    ref = serializers.RegexField(
        REF_PATTERN.pattern, max_length=64, help_text="A name for this task inside the plan (not a task key)."
    )
    title = serializers.CharField(max_length=300)
    description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    acceptance_criteria = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
    status = serializers.ChoiceField(choices=sorted(INITIAL_STATUSES), required=False, default=TaskStatus.OPEN)
    blocked_reason = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, default="", help_text="Required for status blocked."
    )
    priority = serializers.IntegerField(required=False, default=0, min_value=-INT32 - 1, max_value=INT32)
    task_class = serializers.SlugField(required=False, allow_blank=True, max_length=64, default="")
    blocked_by = serializers.ListField(
        child=serializers.CharField(max_length=ENTRY_MAX_CHARS),
        required=False,
        default=list,
        max_length=MAX_PLAN_EDGES,
        help_text="Refs of this plan or keys of existing tasks of the project.",
    )
    # Checked with the plan's own rules (`ledger.label_sets`), so every bad label is reported with its path.
    requires = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=list,
        help_text='Labels a claimer must carry (SPEC §23.1), e.g. ["gpu"].',
    )


class PlanDecisionSerializer(serializers.Serializer[Any]):
    title = serializers.CharField(max_length=DECISION_TITLE_MAX_CHARS)
    body = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, max_length=DECISION_BODY_MAX_CHARS, default=""
    )
    task = serializers.CharField(
        required=False, max_length=ENTRY_MAX_CHARS, help_text="A ref of this plan or the key of an existing task."
    )


class PlanOutputSerializer(serializers.Serializer[Any]):
    keys = serializers.DictField(child=serializers.CharField(), help_text="The new task's key by ref.")
    created = serializers.IntegerField(help_text="How many tasks were created.")
    edges = serializers.IntegerField(help_text="How many dependencies were created.")
    decisions = serializers.ListField(child=serializers.IntegerField(), help_text="The new decisions' ids.")


class PlanWouldCreateSerializer(serializers.Serializer[Any]):
    tasks = serializers.IntegerField()
    edges = serializers.IntegerField()
    decisions = serializers.IntegerField()


class PlanDryRunSerializer(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField()
    created = serializers.IntegerField(help_text="Always 0: a dry run writes nothing.")
    would_create = PlanWouldCreateSerializer()
    refs = serializers.ListField(child=serializers.CharField(), help_text="In the order keys would be given.")


class PlanQuery(serializers.Serializer[Any]):
    dry_run = serializers.ChoiceField(choices=["true", "false"], required=False)


class PlanInputSerializer(serializers.Serializer[Any]):
    project = serializers.SlugField(max_length=50)
    # many=True passes min_length/max_length to the ListSerializer (the stubs do not say so).
    tasks = PlanTaskSerializer(many=True, min_length=1, max_length=MAX_PLAN_TASKS)  # type: ignore[call-arg]
    decisions = PlanDecisionSerializer(many=True, required=False, max_length=MAX_PLAN_DECISIONS)  # type: ignore[call-arg]


PART_FIELDS = {"tasks": PlanTaskSerializer, "decisions": PlanDecisionSerializer}


def _ref_at(data: Mapping[str, Any], part: str, index: int) -> str | None:
    items = data.get(part)
    if part == "tasks" and isinstance(items, list) and index < len(items) and isinstance(items[index], Mapping):
        ref = items[index].get("ref")
        return ref if isinstance(ref, str) else None
    return None


def _flatten(detail: Any, path: str, data: Mapping[str, Any], into: list[PlanProblem]) -> None:
    """DRF's nested errors as one problem per path, naming the task's ref where there is one."""
    if isinstance(detail, Mapping):
        for name, inner in detail.items():
            step = "" if name == "non_field_errors" else (f"{path}.{name}" if path else str(name))
            _flatten(inner, step or path, data, into)
        return
    if isinstance(detail, list) and detail and all(isinstance(item, str) for item in detail):
        into.append(PlanProblem(path or "body", " ".join(str(item) for item in detail), _ref_of(path, data)))
        return
    if isinstance(detail, list):
        for index, inner in enumerate(detail):
            if inner:
                _flatten(inner, f"{path}[{index}]", data, into)
        return
    into.append(PlanProblem(path or "body", str(detail), _ref_of(path, data)))


def _ref_of(path: str, data: Mapping[str, Any]) -> str | None:
    if not path.startswith("tasks["):
        return None
    try:
        return _ref_at(data, "tasks", int(path[len("tasks[") : path.index("]")]))
    except ValueError:
        return None


def plan_input(request: Request) -> dict[str, Any]:
    """The body's plan, its shape checked whole: every unknown field and bad value at once, by path and ref."""
    data = request.data
    if not isinstance(data, Mapping):
        raise ValidationFailed("The request body must be a JSON object.")
    serializer = PlanInputSerializer(data=data)
    refuse_unknown(data, serializer.fields, where="body")
    problems: list[PlanProblem] = []
    for part, item_serializer in PART_FIELDS.items():
        items = data.get(part)
        if not isinstance(items, list) or len(items) > MAX_PLAN_TASKS:
            continue
        known = set(item_serializer().fields)
        for index, item in enumerate(items):
            if isinstance(item, Mapping):
                problems.extend(
                    PlanProblem(f"{part}[{index}].{name}", "unknown field", _ref_at(data, part, index))
                    for name in sorted(set(item) - known)
                )
    try:
        serializer.is_valid(raise_exception=True)
    except drf.ValidationError as error:
        _flatten(error.detail, "", data, problems)
    if problems:
        raise plan_refused(problems)
    return dict(serializer.validated_data)


class PlanApplyApi(ApiView):
    """File a whole plan: tasks named by `ref`, their dependencies and decisions, all or nothing.

    At most 200 tasks, 500 `blocked_by` entries and 50 decisions. Every problem is reported at
    once in `details.errors` (`path`, `ref`, `message`); a cycle among the plan's tasks is
    DEPENDENCY_CYCLE with `details.path` in refs. Keys follow the plan's order. A `blocked_by`
    key may name a task of another project you can see (SPEC §22).
    """

    user_permission = "ledger.add_task"  # and DECISION_PERMISSION when the plan has decisions
    InputSerializer = PlanInputSerializer
    OutputSerializer = PlanOutputSerializer

    @extend_schema(
        operation_id="plans_apply",
        request=InputSerializer,
        parameters=[
            IDEMPOTENCY_KEY,
            OpenApiParameter(
                "dry_run", str, enum=["true", "false"], description="true: check the plan and write nothing (200)."
            ),
        ],
        responses={
            201: OutputSerializer,
            200: OpenApiResponse(PlanDryRunSerializer, description="A dry run: what would be created."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request) -> Any:
        dry_run = query_input(PlanQuery, request).get("dry_run") == "true"
        data = plan_input(request)
        caller = caller_of(request)
        tasks = [
            PlannedTask(**{**item, "blocked_by": tuple(item["blocked_by"]), "requires": tuple(item["requires"])})
            for item in data["tasks"]
        ]
        decisions = [PlannedDecision(**item) for item in data.get("decisions", [])]
        user: Any = request.user  # a session user, or the agent's principal (which has no permissions to ask)
        if decisions and caller.user is not None and not user.has_perm(DECISION_PERMISSION):
            # `POST /decisions/` asks for it; a plan's decisions are no side door.
            raise PermissionDenied(f"Your account lacks the permission {DECISION_PERMISSION} a plan's decisions need.")

        def work() -> MutationResult:
            project = project_by_slug(data["project"], agent=caller.agent)
            if dry_run:
                checked = plan_check(project=project, tasks=tasks, decisions=decisions, agent=caller.agent)
                would = {"tasks": len(checked.tasks), "edges": checked.edge_count, "decisions": len(decisions)}
                return MutationResult(
                    status=200, data={"dry_run": True, "created": 0, "would_create": would, "refs": checked.refs}
                )
            result = plan_apply(project=project, tasks=tasks, decisions=decisions, actor=caller.actor)
            return MutationResult(
                status=201,
                data={
                    "keys": result.keys,
                    "created": result.created,
                    "edges": result.edges,
                    "decisions": result.decisions,
                },
            )

        return run_mutation(request, work)
