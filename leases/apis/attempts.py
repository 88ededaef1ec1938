"""Attempt endpoints: read, and the holder's calls (renew, notes, git facts, finish, release).

Every holder call carries the attempt id (URL), `X-Lease-Token` and
`X-Lease-Epoch`; the services fence it (SPEC §3). Another agent's attempt is
NOT_FOUND, as the services decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.base import ApiView
from api.inputs import body_input
from api.mutations import MutationResult, run_mutation
from api.schema import HOLDER_HEADERS, READ_ERRORS, WRITE_ERRORS, error_responses
from core.errors import ValidationFailed
from leases.apis.fields import (
    AbsolutePathField,
    BranchNameField,
    CommitIdField,
    HostNameField,
    NextStepsField,
    NoteContentField,
    usage_field,
)
from leases.apis.holder import holder_proof_from_headers
from leases.apis.projections import attempt_summary, compact_task, ended_task_row
from leases.apis.serializers import AttemptDetailSerializer, AttemptSummarySerializer, FinishedSerializer
from leases.models import (
    AGENT_NOTE_KINDS,
    HOST_MAX_CHARS,
    REVIEW_FINDING_MAX_CHARS,
    REVIEW_FINDINGS_MAX_ITEMS,
    WORKTREE_PATH_MAX_CHARS,
    FailureReason,
    InterruptionReason,
    NoteKind,
)
from leases.selectors import attempt_by_id, attempt_notes, attempt_spent
from leases.services import (
    Finished,
    Outcome,
    attempt_finish,
    attempt_release,
    attempt_renew,
    attempt_set_git,
    note_add,
)
from leases.services.git_facts import GIT_FACT_FIELDS
from ledger import clock
from ledger.models import TaskStatus

INT32_MAX = 2**31 - 1
COMMIT_PATTERN = r"^[0-9a-f]{40}$"


class GitFactsSerializer(serializers.Serializer[Any]):
    """Git facts (SPEC §15.4), all optional; unknown names are refused.

    A null for one of the facts §15.4 added means "not reported".

    The door checks shapes; `leases.services.git_facts` keeps the rules.
    """

    # Unknown names are refused (`to_internal_value`): the schema says so of this nested object too.
    schema_rules: ClassVar[dict[str, Any]] = {"additionalProperties": False}

    branch = BranchNameField(required=False, max_length=200, help_text="Conventional Branch name.")
    base_commit = CommitIdField(required=False, max_length=64, help_text="40-hex commit the branch started from.")
    head_commit = serializers.RegexField(
        COMMIT_PATTERN, required=False, allow_null=True, help_text="40-hex commit at the branch's tip."
    )
    commits_ahead = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=INT32_MAX, help_text="Commits beyond base_commit."
    )
    dirty = serializers.BooleanField(required=False, allow_null=True, help_text="Uncommitted changes in the worktree.")
    pushed = serializers.BooleanField(required=False, allow_null=True, help_text="The remote has the head commit.")
    worktree_path = AbsolutePathField(
        required=False, allow_null=True, max_length=WORKTREE_PATH_MAX_CHARS, help_text="Absolute path of the worktree."
    )
    host = HostNameField(
        required=False, allow_null=True, max_length=HOST_MAX_CHARS, help_text="The machine the worktree is on."
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


def _text_list() -> serializers.ListField:
    return NextStepsField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False, default=list
    )


class AttemptDetailApi(ApiView):
    """An attempt of a task you can see, with its latest notes as excerpts."""

    attempt_scope = "attempt"

    @extend_schema(
        operation_id="attempts_retrieve",
        responses={200: AttemptDetailSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = attempt_by_id(attempt_id, agent=caller_of(request).agent)
        attempt.latest_notes, attempt.notes_total = attempt_notes(attempt)  # type: ignore[attr-defined]
        attempt.spent_totals = attempt_spent(attempt)  # type: ignore[attr-defined]
        return Response(AttemptDetailSerializer(attempt).data)


class AttemptRenewApi(ApiView):
    """Heartbeat: extend the lease (never shortening it)."""

    attempt_scope = "attempt"

    class InputSerializer(serializers.Serializer[Any]):
        lease_seconds = serializers.IntegerField(required=False, min_value=1, max_value=INT32_MAX)
        usage = usage_field()

    # Schema-only: a renewal is a measured hot path, its body is a plain dict.
    class OutputSerializer(serializers.Serializer[Any]):
        lease_expires_at = serializers.DateTimeField()
        renew_count = serializers.IntegerField()
        task_status = serializers.ChoiceField(
            choices=TaskStatus.values,
            help_text="The task's stored status. `cancelled`: the task was cancelled while you held it; "
            "stop, and release the attempt (or finish it as failed or handoff).",
        )
        new_comments = serializers.IntegerField(help_text="Comments on the task since your claim.")

    @extend_schema(
        operation_id="attempts_renew",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            attempt = attempt_renew(proof=proof, lease_seconds=data.get("lease_seconds"), usage=data.get("usage"))
            return MutationResult(
                status=200,
                data={
                    "lease_expires_at": clock.iso(attempt.lease_expires_at),
                    "renew_count": attempt.renew_count,
                    "task_status": attempt.task.status,
                    "new_comments": getattr(attempt, "new_comments", 0),
                },
            )

        return run_mutation(request, work)


class NoteSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=NoteKind.values)
    content = serializers.CharField()
    next_steps = serializers.ListField(child=serializers.CharField())
    important = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class NoteAddApi(ApiView):
    """A progress, finding, warning or checkpoint note; renews the lease."""

    attempt_scope = "attempt"

    class InputSerializer(serializers.Serializer[Any]):
        kind = serializers.ChoiceField(choices=AGENT_NOTE_KINDS)
        content = NoteContentField(trim_whitespace=False, help_text="At most 8,000 characters.")
        next_steps = _text_list()
        important = serializers.BooleanField(required=False, default=False)
        usage = usage_field()

    # Schema-only: a note is a measured hot path, its body is a plain dict.
    class OutputSerializer(serializers.Serializer[Any]):
        note = NoteSerializer()
        lease_expires_at = serializers.DateTimeField()

    @extend_schema(
        operation_id="attempts_notes_create",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={201: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            written = note_add(proof=proof, **data)
            note = written.note
            return MutationResult(
                status=201,
                data={
                    "note": {
                        "id": note.pk,
                        "attempt": note.attempt_id,
                        "kind": note.kind,
                        "content": note.content,
                        "next_steps": note.next_steps,
                        "important": note.important,
                        "created_at": clock.iso(note.created_at),
                    },
                    "lease_expires_at": clock.iso(written.lease_expires_at),
                },
            )

        return run_mutation(request, work)


def finished_result(finished: Finished) -> MutationResult:
    """Finish's body as a plain dict: finish is a measured hot path (FinishedSerializer is its schema)."""
    return MutationResult(
        status=200,
        data={
            "attempt": attempt_summary(finished.attempt),
            "task": compact_task(ended_task_row(finished.task, finished.attempt.agent, blocked_by=finished.blocked_by)),
        },
    )


class AttemptFinishApi(ApiView):
    """End the attempt: done or review (completed), failed, or handoff (interrupted).

    A review attempt decides: approved, changes_requested (with findings) or blocked (the
    summary is the reason); approving a target that moved is STALE_REVIEW_TARGET.
    """

    attempt_scope = "attempt"

    class InputSerializer(serializers.Serializer[Any]):
        outcome = serializers.ChoiceField(choices=[*Outcome.ALL, *Outcome.REVIEW_DECISIONS])
        result_summary = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="")
        next_steps = _text_list()
        failure_reason_code = serializers.ChoiceField(choices=FailureReason.values, required=False)
        interruption_reason_code = serializers.ChoiceField(choices=InterruptionReason.values, required=False)
        acknowledged_version = serializers.IntegerField(
            required=False, min_value=1, max_value=INT32_MAX, help_text="Needed when the task changed since the claim."
        )
        git = GitFactsSerializer(required=False, help_text="The final git facts, recorded before the attempt ends.")
        findings = serializers.ListField(
            child=serializers.CharField(max_length=REVIEW_FINDING_MAX_CHARS, trim_whitespace=False),
            max_length=REVIEW_FINDINGS_MAX_ITEMS,
            required=False,
            help_text="A review decision's findings: at most 20 of at most 500 characters.",
        )
        usage = usage_field()

    # Schema-only: the body as one shape per outcome, as `leases.services.finishing` reads it:
    # failed needs failure_reason_code, handoff needs interruption_reason_code, and neither
    # code goes with another outcome.
    @extend_schema_serializer(exclude_fields=["failure_reason_code", "interruption_reason_code", "findings"])
    class CompletedInput(InputSerializer):
        outcome = serializers.ChoiceField(choices=[Outcome.DONE, Outcome.REVIEW])

    @extend_schema_serializer(
        exclude_fields=["failure_reason_code", "interruption_reason_code", "acknowledged_version"]
    )
    class DecisionInput(InputSerializer):
        outcome = serializers.ChoiceField(choices=list(Outcome.REVIEW_DECISIONS))

    @extend_schema_serializer(exclude_fields=["interruption_reason_code", "findings"])
    class FailedInput(InputSerializer):
        outcome = serializers.ChoiceField(choices=[Outcome.FAILED])
        failure_reason_code = serializers.ChoiceField(choices=FailureReason.values)

    @extend_schema_serializer(exclude_fields=["failure_reason_code", "findings"])
    class HandoffInput(InputSerializer):
        outcome = serializers.ChoiceField(choices=[Outcome.HANDOFF])
        interruption_reason_code = serializers.ChoiceField(choices=InterruptionReason.values)

    OutputSerializer = FinishedSerializer

    @extend_schema(
        operation_id="attempts_finish",
        request=PolymorphicProxySerializer(
            component_name="AttemptFinishInput",
            serializers={
                Outcome.DONE: CompletedInput,
                Outcome.REVIEW: CompletedInput,
                Outcome.FAILED: FailedInput,
                Outcome.HANDOFF: HandoffInput,
                Outcome.APPROVED: DecisionInput,
                Outcome.CHANGES_REQUESTED: DecisionInput,
                Outcome.BLOCKED: DecisionInput,
            },
            resource_type_field_name="outcome",
        ),
        parameters=HOLDER_HEADERS,
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            return finished_result(attempt_finish(proof=proof, **data))

        return run_mutation(request, work)


class AttemptReleaseApi(ApiView):
    """Give the task back untouched: the attempt is released, the task stays as it is."""

    attempt_scope = "attempt"

    class InputSerializer(serializers.Serializer[Any]):
        reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")

    OutputSerializer = FinishedSerializer

    @extend_schema(
        operation_id="attempts_release",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            released = attempt_release(proof=proof, reason=data["reason"])
            shown = {"attempt": released.attempt, "task": ended_task_row(released.task, released.attempt.agent)}
            return MutationResult(status=200, data=self.OutputSerializer(shown).data)

        return run_mutation(request, work)


class AttemptGitApi(ApiView):
    """Record the attempt's git facts (a new branch rewrites the label); renews the lease."""

    attempt_scope = "attempt"

    class InputSerializer(GitFactsSerializer):
        usage = usage_field()

        # At least one fact (or usage) named; a fact given as null is named and "not reported".
        schema_rules: ClassVar[dict[str, Any]] = {"minProperties": 1}

    class OutputSerializer(serializers.Serializer[Any]):
        attempt = AttemptSummarySerializer()

    @extend_schema(
        operation_id="attempts_git",
        request=InputSerializer,
        parameters=HOLDER_HEADERS,
        responses={200: OutputSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = body_input(self.InputSerializer, request)
        if not data:
            raise ValidationFailed(f"Give at least one git fact: {', '.join(GIT_FACT_FIELDS)}.")
        proof = holder_proof_from_headers(request, attempt_id=attempt_id)

        def work() -> MutationResult:
            attempt = attempt_set_git(proof=proof, **data)
            return MutationResult(status=200, data=self.OutputSerializer({"attempt": attempt}).data)

        return run_mutation(request, work)
