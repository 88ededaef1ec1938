"""Review endpoints (SPEC §16.1): list and read requests, claim one (or the next) as a review attempt.

A review claim answers the claim's shape (`leases.apis.claims.claim_result`: attempt, lease
token once, epoch, label, compact task, work context whose `review` part names the work
pinned) plus the compact `review`. A review attempt then renews, writes notes and finishes
through the attempt endpoints, like any attempt.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.claim_wait import NotYet, wait_for_claim
from api.inputs import PageQuery, body_input, decode_cursor, encode_cursor, query_input
from api.mutations import MutationResult, run_mutation
from api.schema import IDEMPOTENCY_KEY, NON_BLANK_TEXT_PATTERN, READ_ERRORS, WRITE_ERRORS, error_responses
from core.errors import TaskTaken
from leases.apis.claims import LEASE_SECONDS_MAX_INPUT, ClaimOutputSerializer, claim_result, wait_field
from leases.models import ReviewRequest, ReviewStatus
from leases.selectors import review_by_id, reviews_visible_to
from leases.services import ReviewGrant, review_claim, review_claim_next
from leases.services.review_claims import claimable_reviews
from ledger import clock
from ledger.selectors import project_by_slug

SUMMARY_SHOWN_CHARS = 300
SLUG_PATTERN = "^[-a-zA-Z0-9_]+$"


def review_item(review: ReviewRequest) -> dict[str, Any]:
    """The compact review: no body beyond a 300-character summary; findings counted."""
    return {
        "id": review.pk,
        "task": review.task.key,
        "project": review.task.project.slug,
        "status": review.status,
        "work_attempt": review.work_attempt_id,
        "worker": review.work_attempt.agent.handle,
        "task_version": review.task_version,
        "head_commit": review.head_commit,
        "reviewer": review.reviewer_label,
        "summary": review.summary[:SUMMARY_SHOWN_CHARS],
        "findings_count": len(review.findings),
        "created_at": clock.iso(review.created_at),
        "decided_at": clock.iso(review.decided_at),
    }


class ReviewItemSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    task = serializers.CharField()
    project = serializers.CharField()
    status = serializers.ChoiceField(choices=ReviewStatus.values)
    work_attempt = serializers.IntegerField()
    worker = serializers.CharField()
    task_version = serializers.IntegerField(help_text="The task's version the review is pinned to.")
    head_commit = serializers.CharField(allow_null=True, help_text="The branch head the review is pinned to.")
    reviewer = serializers.CharField(allow_null=True)
    summary = serializers.CharField(allow_blank=True, help_text="At most 300 characters of the decision's summary.")
    findings_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)


class ReviewDetailSerializer(ReviewItemSerializer):
    summary = serializers.CharField(allow_blank=True, help_text="The decision's summary.")
    findings = serializers.ListField(child=serializers.CharField())


class ReviewPageSerializer(serializers.Serializer[Any]):
    results = ReviewItemSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class ReviewListQuery(PageQuery):
    project = serializers.SlugField(required=False, max_length=50)
    status = serializers.ChoiceField(choices=ReviewStatus.values, required=False)


class ReviewListApi(ApiView):
    """Review requests, newest first (compact, cursor pages); filter by project and status."""

    @extend_schema(
        operation_id="reviews_list",
        parameters=[
            OpenApiParameter("project", {"type": "string", "maxLength": 50, "pattern": SLUG_PATTERN}),
            OpenApiParameter("status", str, enum=ReviewStatus.values),
            OpenApiParameter(
                "cursor", {"type": "string", "minLength": 1, "maxLength": 300, "pattern": NON_BLANK_TEXT_PATTERN}
            ),
            OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
        ],
        responses={200: ReviewPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        agent = caller_of(request).agent
        query = query_input(ReviewListQuery, request)
        reviews = reviews_visible_to(agent).select_related("task__project", "work_attempt__agent", "reviewer_agent")
        reviews = reviews.select_related("reviewer_user")
        if "project" in query:
            reviews = reviews.filter(task__project=project_by_slug(query["project"], agent=agent))
        if "status" in query:
            reviews = reviews.filter(status=query["status"])
        if "cursor" in query:
            reviews = reviews.filter(id__lt=decode_cursor(query["cursor"], expected={"before": int})["before"])
        rows = list(reviews.order_by("-id")[: query["limit"] + 1])
        more = len(rows) > query["limit"]
        rows = rows[: query["limit"]]
        next_cursor = encode_cursor({"before": rows[-1].pk}) if more else None
        return Response({"results": [review_item(row) for row in rows], "next_cursor": next_cursor})


class ReviewDetailApi(ApiView):
    """One review request with its summary and findings."""

    @extend_schema(
        operation_id="reviews_retrieve", responses={200: ReviewDetailSerializer, **error_responses(*READ_ERRORS)}
    )
    def get(self, request: Request, review_id: int) -> Response:
        review = review_by_id(review_id, agent=caller_of(request).agent)
        return Response({**review_item(review), "summary": review.summary, "findings": list(review.findings)})


class ReviewClaimOutputSerializer(ClaimOutputSerializer):
    review = ReviewItemSerializer()


def review_claim_result(granted: ReviewGrant) -> MutationResult:
    outcome = claim_result(granted.grant)
    return MutationResult(
        status=outcome.status,
        attempt_id=outcome.attempt_id,
        data={**outcome.data, "review": review_item(granted.request)},
    )


class ReviewClaimInput(serializers.Serializer[Any]):
    lease_seconds = serializers.IntegerField(
        required=False, min_value=1, max_value=LEASE_SECONDS_MAX_INPUT, help_text="Requested lease length."
    )


class ReviewClaimApi(ApiView):
    """Claim this review: a review attempt under its own lease, token and epoch; not your own work."""

    InputSerializer = ReviewClaimInput

    @extend_schema(
        operation_id="reviews_claim",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: ReviewClaimOutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, review_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        agent = caller_of(request).require_agent()

        def work() -> MutationResult:
            review = review_by_id(review_id, agent=agent)
            return review_claim_result(review_claim(request=review, agent=agent, **data))

        return run_mutation(request, work)


class ReviewNextApi(ApiView):
    """Claim the project's oldest open review that is not your own work; 204 when there is none.

    With `wait` the server holds the request until a review opens for you or the time is up.
    """

    class InputSerializer(ReviewClaimInput):
        project = serializers.SlugField(max_length=50)
        wait = wait_field("an open review")

    @extend_schema(
        operation_id="reviews_next",
        request=InputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: ReviewClaimOutputSerializer,
            204: OpenApiResponse(description="No review is open."),
            **error_responses(*WRITE_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        data = body_input(self.InputSerializer, request)
        slug, wait = data.pop("project"), data.pop("wait")
        agent = caller_of(request).require_agent()
        if not wait:

            def work() -> MutationResult:
                project = project_by_slug(slug, agent=agent)
                granted = review_claim_next(project=project, agent=agent, **data)
                return MutationResult(status=204) if granted is None else review_claim_result(granted)

            return run_mutation(request, work)

        project = project_by_slug(slug, agent=agent)

        def try_claim(final: bool) -> Response | None:
            def work() -> MutationResult:
                try:
                    granted = review_claim_next(project=project, agent=agent, **data)
                except TaskTaken:
                    granted = None  # a lost race: wait on
                if granted is None and not final:
                    raise NotYet
                return MutationResult(status=204) if granted is None else review_claim_result(granted)

            try:
                return run_mutation(request, work)
            except NotYet:
                return None

        def count_claimable() -> int:  # 1 or 0: "some" (`counted` 1)
            return int(claimable_reviews(project=project, agent=None, now=clock.now()).exists())

        def looks_claimable() -> bool:
            return claimable_reviews(project=project, agent=agent, now=clock.now()).exists()

        return wait_for_claim(
            request,
            project_ids=(project.pk,),
            queue="review",
            seconds=wait,
            try_claim=try_claim,
            count_claimable=count_claimable,
            looks_claimable=looks_claimable,
        )
