"""Claims: a named task, or the next claimable task of a project (SPEC §3, §8).

The response carries the lease token once; an idempotent replay re-derives
it (`leases.idempotency`), it is never stored.
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of, claimable_read, known_project
from api.base import ApiView
from api.claim_wait import MAX_WAIT_SECONDS, NotYet, wait_for_claim
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, WRITE_ERRORS, error_responses
from core.errors import TaskTaken
from environments.models import EnvironmentKind
from leases.apis.fields import BranchNameField, CommitIdField, EnvironmentNameField, paths_field
from leases.apis.projections import attempt_summary, held_compact_task
from leases.apis.serializers import AttemptSummarySerializer, CompactTaskSerializer, WorkContextSerializer
from leases.context import work_context
from leases.selectors import CLAIMABLE_COUNTED, claimable_count_by_anyone
from leases.services import LeaseGrant, anything_to_claim, lease_claim, lease_claim_next
from ledger import clock
from ledger.models import PathsMode
from ledger.selectors import task_by_key, unfinished_tasks

LEASE_SECONDS_MAX_INPUT = 2**31 - 1


def wait_field(what: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_WAIT_SECONDS,
        default=0,
        help_text=f"Seconds to wait for {what} when there is none yet (0: answer at once); 204 at the deadline.",
    )


class ClaimInputSerializer(serializers.Serializer[Any]):
    lease_seconds = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=LEASE_SECONDS_MAX_INPUT,
        help_text="Requested lease length; clamped to the server's bounds (30 s to 24 h by default).",
    )
    branch = BranchNameField(required=False, max_length=200, help_text="Conventional Branch 1.1.0 name.")
    base_commit = CommitIdField(required=False, max_length=64, help_text="40-hex commit you start from.")
    environment = EnvironmentNameField(
        required=False, max_length=100, help_text="Allocate this environment (by name) with the lease."
    )
    environment_kind = serializers.ChoiceField(
        choices=EnvironmentKind.values, required=False, help_text="Allocate any free environment of this kind."
    )
    paths = paths_field("Repository paths to reserve while the lease lives (default: the task's).")
    paths_mode = serializers.ChoiceField(
        choices=PathsMode.values, required=False, help_text="exclusive (default) or shared (coexists with shared)."
    )

    # `leases.services.claims`: an environment by name or by kind, not both.
    schema_rules: ClassVar[dict[str, Any]] = {"not": {"required": ["environment", "environment_kind"]}}


# Schema-only: a claim is a measured hot path, its body is the plain dict of `claim_result`.
class ClaimOutputSerializer(serializers.Serializer[Any]):
    attempt = AttemptSummarySerializer()
    lease_token = serializers.CharField(help_text="Shown once (replayed under the same Idempotency-Key).")
    lease_expires_at = serializers.DateTimeField()
    renew_every_seconds = serializers.IntegerField()
    renew_attempts = serializers.IntegerField(help_text="After this many failed renewals, stop and release.")
    epoch = serializers.IntegerField()
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    task = CompactTaskSerializer()
    context = WorkContextSerializer()  # type: ignore[assignment]  # a field named like Field.context


def claim_result(grant: LeaseGrant) -> MutationResult:
    attempt = grant.attempt
    return MutationResult(
        status=201,
        attempt_id=attempt.pk,
        data={
            "attempt": attempt_summary(attempt, allocation=grant.allocation),
            "lease_token": grant.token,
            "lease_expires_at": clock.iso(attempt.lease_expires_at),
            "renew_every_seconds": grant.renew_every_seconds,
            "renew_attempts": grant.renew_attempts,
            "epoch": attempt.epoch,
            "label": attempt.label,
            "task": held_compact_task(grant.task, attempt),
            "context": work_context(
                task=grant.task,
                now=clock.now(),
                attempt=attempt,
                allocation=grant.allocation,
                just_claimed=True,
                predecessor_id=grant.predecessor_id,
                reservation=grant.reservation,
                known_empty=grant.known_empty,
            ),
        },
    )


class TaskClaimApi(ApiView):
    """Claim this task: a new attempt under a fresh lease and epoch."""

    InputSerializer = ClaimInputSerializer
    OutputSerializer = ClaimOutputSerializer

    @extend_schema(
        operation_id="tasks_claim",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, key: str) -> Response:
        data = body_input(self.InputSerializer, request)
        agent = caller_of(request).require_agent()

        def work() -> MutationResult:
            task = task_by_key(key, agent=agent)
            return claim_result(lease_claim(task=task, agent=agent, **data))

        return run_mutation(request, work)


class ClaimNextApi(ApiView):
    """Claim the project's next claimable task (priority, then age); 204 when there is none.

    With `wait` the server holds the request until a task becomes claimable for
    you (one waiter per event is woken, not all) or the time is up; a task
    taken by another agent meanwhile just means waiting on. With `until_empty`
    it also answers 204 once the project's work is finished, and a wake that
    finds the project finished is passed on to every waiter, so a fleet that
    runs until the work is done learns it at once.
    """

    class InputSerializer(ClaimInputSerializer):
        project = serializers.SlugField(max_length=50)
        task_class = serializers.SlugField(required=False, max_length=64)
        wait = wait_field("a claimable task")
        until_empty = serializers.BooleanField(
            required=False,
            default=False,
            help_text="With `wait`: answer 204 at once when the project's work is finished (no task open, ready, "
            "in review or delivered: `GET /projects/{slug}/`'s `progress.finished`), instead of waiting on.",
        )

    OutputSerializer = ClaimOutputSerializer
    # The body's project is read with the token's agent, in authentication's statement (`api.auth`), and
    # for a claim that neither waits nor names a class, whether anything of it is claimable.
    auth_project_field = "project"
    auth_claimable_read = True

    @extend_schema(
        operation_id="claims_next",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: OutputSerializer,
            204: OpenApiResponse(description="Nothing is claimable."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        slug, wait, until_empty = data.pop("project"), data.pop("wait"), data.pop("until_empty")
        agent = caller_of(request).require_agent()
        if not wait:

            def work() -> MutationResult:
                project = known_project(request, slug, agent)
                read = claimable_read(request, slug)
                grant = lease_claim_next(project=project, agent=agent, claimable_read=read, **data)
                return MutationResult(status=204) if grant is None else claim_result(grant)

            return run_mutation(request, work)

        project = known_project(request, slug, agent)

        def finished() -> bool:
            return until_empty and not unfinished_tasks(project, task_class=data.get("task_class")).exists()

        def try_claim(final: bool) -> Response | None:
            def work() -> MutationResult:
                try:
                    grant = lease_claim_next(project=project, agent=agent, **data)
                except TaskTaken:
                    grant = None  # a lost race: wait on
                if grant is None and not final and not finished():
                    raise NotYet
                return MutationResult(status=204) if grant is None else claim_result(grant)

            try:
                return run_mutation(request, work)
            except NotYet:
                return None

        def count_claimable() -> int:
            return claimable_count_by_anyone(project, now=clock.now())

        def project_finished() -> bool:
            # Its wake goes on to the waiters that run until the project is finished (`until_empty`).
            return not unfinished_tasks(project).exists()

        def looks_claimable() -> bool:
            task_class = data.get("task_class")
            return anything_to_claim(project=project, agent=agent, task_class=task_class) or finished()

        return wait_for_claim(
            request,
            project_ids=(project.pk,),
            queue="work",
            seconds=wait,
            try_claim=try_claim,
            count_claimable=count_claimable,
            counted=CLAIMABLE_COUNTED,
            looks_claimable=looks_claimable,
            until_empty=until_empty,
            finished=project_finished,
        )
