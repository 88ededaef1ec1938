"""The landing queue's API (SPEC §21): claim the next landing, renew it, finish it; read the queue.

A lander (`leasehold land`, `agent/land/`) is an agent of the project. Its holder calls present the
landing's token and epoch in `X-Lease-Token` / `X-Lease-Epoch`, as work attempts do.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.claim_wait import MAX_WAIT_SECONDS, NotYet, wait_for_claim
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import HOLDER_HEADERS, IDEMPOTENCY_KEY, READ_ERRORS, WRITE_ERRORS, error_responses
from landing.models import (
    CONFLICT_PATHS_MAX,
    OUTPUT_TAIL_MAX_CHARS,
    Landing,
    LandingOutcome,
    LandingResult,
    LandingStatus,
)
from landing.selectors import landing_overview, landing_summary
from landing.services import (
    LandingGrant,
    LandingProof,
    TaskResult,
    landing_claim_next,
    landing_finish,
    landing_release,
    landing_renew,
)
from landing.services.claiming import landing_queue, refuse_unless_landing
from landing.services.releasing import REASON_MAX_CHARS
from leases.apis.holder import holder_proof_from_headers
from ledger import clock
from ledger.selectors import project_by_slug

LEASE_SECONDS_MAX_INPUT = 2**31 - 1
WAIT_MAX_SECONDS = MAX_WAIT_SECONDS


def grant_result(grant: LandingGrant) -> MutationResult:
    landing = grant.landing
    project = landing.project
    return MutationResult(
        status=201,
        attempt_id=grant.first_attempt_id,
        data={
            "landing": {
                "id": landing.pk,
                "epoch": landing.epoch,
                "project": project.slug,
                "target_branch": landing.target_branch,
                "method": landing.method,
                "check_command": landing.check_command,
                "check_timeout_seconds": landing.check_timeout_seconds,
                "batch_max": project.batch_max,
                "remote": project.remote,
                "repository": project.repository,
                "lease_token": grant.token,
                "lease_seconds": landing.lease_seconds,
                "lease_expires_at": clock.iso(landing.lease_expires_at),
                "renew_every_seconds": grant.renew_every_seconds,
            },
            "tasks": [
                {
                    "key": entry.task.key,
                    "title": entry.task.title,
                    "attempt_id": entry.attempt_id,
                    "epoch": entry.attempt.epoch,
                    "branch": entry.branch,
                    "head_commit": entry.head_commit,
                    "label": entry.attempt.label,
                }
                for entry in grant.entries
            ],
        },
    )


# Schema-only: a landing claim's body is the plain dict of `grant_result`.
class LandingLeaseSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    epoch = serializers.IntegerField(help_text="The landing's number on its target: send it as X-Lease-Epoch.")
    project = serializers.SlugField()
    target_branch = serializers.CharField()
    method = serializers.ChoiceField(choices=["merge", "squash", "rebase"])
    check_command = serializers.CharField(allow_blank=True)
    check_timeout_seconds = serializers.IntegerField()
    batch_max = serializers.IntegerField()
    remote = serializers.CharField(allow_blank=True)
    repository = serializers.CharField(allow_blank=True)
    lease_token = serializers.CharField(help_text="Shown once: send it as X-Lease-Token.")
    lease_seconds = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField()
    renew_every_seconds = serializers.IntegerField()


class LandingTaskSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    title = serializers.CharField()
    attempt_id = serializers.IntegerField()
    epoch = serializers.IntegerField()
    branch = serializers.CharField()
    head_commit = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label


class LandingGrantSerializer(serializers.Serializer[Any]):
    landing = LandingLeaseSerializer()
    tasks = LandingTaskSerializer(many=True, help_text="The tasks to land, in queue order.")


class LandingNextApi(ApiView):
    """Claim the next landing of a project's target: up to `batch_max` delivered tasks; 204 when the queue
    is empty or another landing of that target is live."""

    class InputSerializer(serializers.Serializer[Any]):
        project = serializers.SlugField(max_length=50)
        lease_seconds = serializers.IntegerField(required=False, min_value=1, max_value=LEASE_SECONDS_MAX_INPUT)
        wait = serializers.IntegerField(
            required=False,
            min_value=0,
            max_value=WAIT_MAX_SECONDS,
            help_text="Seconds to wait for a landing when there is none now (SPEC §25); 204 at the deadline.",
        )

    @extend_schema(
        operation_id="landings_next",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: OpenApiResponse(
                LandingGrantSerializer, description="The landing, its lease token (shown once) and its tasks in order."
            ),
            204: OpenApiResponse(description="Nothing to land now."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        agent = caller_of(request).require_agent()
        slug, wait = data["project"], data.get("wait") or 0
        if not wait:

            def work() -> MutationResult:
                project = project_by_slug(slug, agent=agent)
                grant = landing_claim_next(project=project, agent=agent, lease_seconds=data.get("lease_seconds"))
                return MutationResult(status=204) if grant is None else grant_result(grant)

            return run_mutation(request, work)

        project = project_by_slug(slug, agent=agent)
        refuse_unless_landing(project)

        def try_claim(final: bool) -> Response | None:
            def work() -> MutationResult:
                grant = landing_claim_next(project=project, agent=agent, lease_seconds=data.get("lease_seconds"))
                if grant is None and not final:
                    raise NotYet
                return MutationResult(status=204) if grant is None else grant_result(grant)

            try:
                return run_mutation(request, work)
            except NotYet:
                return None

        def landable() -> bool:
            """A landing could start now: the target has no live landing and a landable task waits."""
            now = clock.now()
            live = Landing.objects.filter(
                project=project,
                target_branch=project.target_branch,
                status=LandingStatus.ACTIVE,
                lease_expires_at__gt=now,
            )
            return not live.exists() and landing_queue(project, now=now).exists()

        return wait_for_claim(
            request,
            project_ids=(project.pk,),
            queue="land",
            seconds=wait,
            try_claim=try_claim,
            count_claimable=lambda: int(landable()),  # 1 or 0: "some" (`counted` 1)
            looks_claimable=landable,
        )


def _landing_proof(request: Request, landing_id: int) -> LandingProof:
    proof = holder_proof_from_headers(request, attempt_id=landing_id)
    return LandingProof(landing_id=landing_id, token=proof.token, epoch=proof.epoch, agent=proof.agent)


class LandingRenewApi(ApiView):
    """Heartbeat of a landing: extend its lease (and its tasks' land attempts'), never shortening it."""

    class InputSerializer(serializers.Serializer[Any]):
        lease_seconds = serializers.IntegerField(required=False, min_value=1, max_value=LEASE_SECONDS_MAX_INPUT)

    @extend_schema(
        operation_id="landings_renew",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={200: OpenApiResponse(description="lease_expires_at, renew_count"), **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, landing_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = _landing_proof(request, landing_id)

        def work() -> MutationResult:
            landing = landing_renew(proof=proof, lease_seconds=data.get("lease_seconds"))
            return MutationResult(
                status=200,
                data={"lease_expires_at": clock.iso(landing.lease_expires_at), "renew_count": landing.renew_count},
            )

        return run_mutation(request, work)


class TaskResultSerializer(serializers.Serializer[Any]):
    key = serializers.CharField(max_length=24)
    outcome = serializers.ChoiceField(
        choices=[value for value in LandingOutcome.values if value not in ("pending", "expired", "released")]
    )
    paths = serializers.ListField(
        child=serializers.CharField(max_length=1000), required=False, default=list, max_length=CONFLICT_PATHS_MAX
    )
    output_tail = serializers.CharField(
        required=False, default="", allow_blank=True, trim_whitespace=False, max_length=OUTPUT_TAIL_MAX_CHARS
    )


class LandingFinishApi(ApiView):
    """End a landing with each task's outcome: landed ones become done, failed ones go back to ready with a
    landing note, deferred ones stay queued."""

    class InputSerializer(serializers.Serializer[Any]):
        result = serializers.ChoiceField(choices=LandingResult.values)
        landed_commit = serializers.RegexField(r"^[0-9a-f]{40}$", required=False, default="")
        check_runs = serializers.IntegerField(required=False, default=0, min_value=0, max_value=10_000)
        tasks = TaskResultSerializer(many=True)

    @extend_schema(
        operation_id="landings_finish",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={
            200: OpenApiResponse(description="The landing and its tasks' statuses."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request, landing_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = _landing_proof(request, landing_id)
        results = [
            TaskResult(
                key=item["key"], outcome=item["outcome"], paths=tuple(item["paths"]), output_tail=item["output_tail"]
            )
            for item in data["tasks"]
        ]

        def work() -> MutationResult:
            landing = landing_finish(
                proof=proof,
                result=data["result"],
                tasks=results,
                landed_commit=data["landed_commit"],
                check_runs=data["check_runs"],
            )
            summary = landing_summary(landing)
            statuses = dict(landing.tasks.values_list("task__key", "task__status"))
            return MutationResult(
                status=200,
                data={
                    "landing": {"id": landing.pk, "status": landing.status, "result": landing.result},
                    "tasks": [{"key": entry["key"], "status": statuses[entry["key"]]} for entry in summary["tasks"]],
                },
            )

        return run_mutation(request, work)


class LandingReleaseApi(ApiView):
    """Give the landing back before it lapses (a lander told to stop): the target is free for the next lander
    at once; its tasks stay delivered in their place in the queue. Repeating it answers the same."""

    class InputSerializer(serializers.Serializer[Any]):
        reason = serializers.CharField(required=False, default="", allow_blank=True, max_length=REASON_MAX_CHARS)

    @extend_schema(
        operation_id="landings_release",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={
            200: OpenApiResponse(description="The landing (`released`) and its tasks' statuses."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request, landing_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = _landing_proof(request, landing_id)

        def work() -> MutationResult:
            released = landing_release(proof=proof, reason=data["reason"])
            landing = released.landing
            tasks = landing.tasks.order_by("position").values_list("task__key", "task__status")
            return MutationResult(
                status=200,
                data={
                    "landing": {"id": landing.pk, "status": landing.status},
                    "tasks": [{"key": key, "status": status} for key, status in tasks],
                },
            )

        return run_mutation(request, work)


class ProjectLandingApi(ApiView):
    """A project's landing queue: its settings, the delivered tasks in order, the live landing, the latest results."""

    @extend_schema(
        operation_id="projects_landing",
        responses={200: OpenApiResponse(description="settings, queue, live, recent"), **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, slug: str) -> Response:
        caller = caller_of(request)
        project = project_by_slug(slug, agent=caller.agent)
        return Response(landing_overview(project, now=clock.now()))
