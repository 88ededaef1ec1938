"""The output serializers of the task and attempt endpoints: they render every body that is not on a
measured hot path, and document every body in the OpenAPI schema.

The hot paths (claim, claim-next, renew, note, finish) build the same shapes
as plain dicts in `leases.apis.projections`; `tests/api/test_projections.py`
checks that both agree. Compact (lists, claims, finishes): never a
description or acceptance criteria. Full: single-object reads only.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from leases.apis.projections import environment_name
from leases.models import AttemptStatus
from leases.selectors import EFFECTIVE_STATUSES, NOTE_EXCERPT_CHARS
from ledger.models import BUDGET_COST_DIGITS, PathsMode, TaskStatus

RESULT_SUMMARY_SHOWN_CHARS = 4000


class BlankAsNullField(serializers.CharField):
    """A text column where "" means "none": rendered as null."""

    def to_representation(self, value: Any) -> Any:
        return str(value) or None


class LabelEnvironmentField(serializers.CharField):
    """The environment an attempt was given, as its server-written label names it (no query)."""

    def get_attribute(self, instance: Any) -> str | None:
        return environment_name(instance)


# Reads a `with_compact_state(...).values(*COMPACT_TASK_FIELDS)` row.
class CompactTaskSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    title = serializers.CharField()
    status = serializers.ChoiceField(choices=TaskStatus.values)
    effective_status = serializers.ChoiceField(choices=list(EFFECTIVE_STATUSES))
    priority = serializers.IntegerField()
    task_class = serializers.CharField(allow_blank=True)
    requires = serializers.ListField(
        child=serializers.CharField(), help_text="Labels a claimer must carry (SPEC §23.1); empty: anyone."
    )
    version = serializers.IntegerField()
    epoch = serializers.IntegerField()
    holder = serializers.CharField(
        source="holder_handle", allow_null=True, help_text="Handle of the live lease's holder."
    )
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    blocked_by = serializers.IntegerField(source="blocked_by_count", help_text="Number of unresolved blockers.")
    claimable = serializers.BooleanField(help_text="A claim by you would be granted now (SPEC §2).")


class CompactTaskPageSerializer(serializers.Serializer[Any]):
    results = CompactTaskSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class DependencySerializer(serializers.Serializer[Any]):
    key = serializers.CharField(source="blocked_by__key")
    status = serializers.ChoiceField(source="blocked_by__status", choices=TaskStatus.values)
    effective_status = serializers.ChoiceField(
        source="blocker_effective_status",
        choices=list(EFFECTIVE_STATUSES),
        help_text="Its effective status (SPEC §1.3); all a stub of another project's task shows beside its key.",
    )


class SpentSerializer(serializers.Serializer[Any]):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.DecimalField(max_digits=BUDGET_COST_DIGITS, decimal_places=6)


class TaskLandingSerializer(serializers.Serializer[Any]):
    """Where the task's work is on its way to the target branch (SPEC §21.1); nulls until delivered or landed."""

    delivered_at = serializers.DateTimeField(allow_null=True)
    delivered_branch = BlankAsNullField(allow_null=True)
    delivered_commit = BlankAsNullField(allow_null=True)
    landed_commit = BlankAsNullField(allow_null=True)
    landed_at = serializers.DateTimeField(allow_null=True)
    landed_by = BlankAsNullField(allow_null=True, help_text="`landing N (lander)` or `reconciliation`.")
    failed_landings = serializers.IntegerField(help_text="Failed landings since it last landed.")


# Reads a task from `leases.selectors.full_task_read`.
class FullTaskSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    project = serializers.CharField(source="project.slug")
    title = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    acceptance_criteria = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=TaskStatus.values)
    effective_status = serializers.ChoiceField(choices=list(EFFECTIVE_STATUSES))
    blocked_reason = serializers.CharField(allow_blank=True)
    priority = serializers.IntegerField()
    task_class = serializers.CharField(allow_blank=True)
    labels = serializers.ListField(child=serializers.CharField())
    requires = serializers.ListField(
        child=serializers.CharField(),
        help_text="Labels a claimer must carry among its own (SPEC §23.1); empty: any agent may claim it.",
    )
    version = serializers.IntegerField()
    epoch = serializers.IntegerField()
    holder = serializers.CharField(source="holder_handle", allow_null=True)
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    reserved_for = serializers.CharField(source="reserved_for.handle", allow_null=True)
    blocked_by = DependencySerializer(
        source="dependencies_shown", many=True, help_text="Present dependencies (at most 100)."
    )
    unresolved_blockers = serializers.IntegerField(source="blocked_by_count")
    ready_since = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    budget_tokens = serializers.IntegerField(allow_null=True, help_text="Tokens all attempts may spend (SPEC §19).")
    budget_cost_usd = serializers.DecimalField(
        max_digits=BUDGET_COST_DIGITS, decimal_places=6, allow_null=True, help_text="US dollars all attempts may spend."
    )
    spent = SpentSerializer(source="spent_totals", help_text="What all its attempts reported spending.")
    paths = serializers.ListField(child=serializers.CharField(), help_text="Paths its claims reserve by default.")
    paths_mode = serializers.ChoiceField(choices=PathsMode.values)
    landing = TaskLandingSerializer(source="*")


class AttemptSummarySerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    task = serializers.CharField(source="task.key")
    epoch = serializers.IntegerField()
    status = serializers.ChoiceField(choices=AttemptStatus.values)
    lease_expires_at = serializers.DateTimeField()
    branch = BlankAsNullField(allow_null=True)
    base_commit = BlankAsNullField(allow_null=True)
    environment = LabelEnvironmentField(allow_null=True, help_text="Name of the environment allocated with the lease.")
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    # Git facts the holder reported (SPEC §15.4); null until reported.
    head_commit = serializers.CharField(allow_null=True)
    commits_ahead = serializers.IntegerField(allow_null=True, help_text="Commits on the branch beyond base_commit.")
    dirty = serializers.BooleanField(allow_null=True, help_text="The worktree had uncommitted changes.")
    pushed = serializers.BooleanField(allow_null=True, help_text="The remote had the head commit.")
    worktree_path = serializers.CharField(allow_null=True)
    host = serializers.CharField(allow_null=True)


class NoteExcerptTruncatedField(serializers.BooleanField):
    """Whether the note is longer than its excerpt."""

    def get_attribute(self, instance: Any) -> bool:
        return bool(instance["content_length"] > len(instance["excerpt"]))


# Reads a row of `leases.selectors.attempt_notes`.
class NoteExcerptSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    important = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    excerpt = serializers.CharField(allow_blank=True, help_text=f"The first {NOTE_EXCERPT_CHARS} characters.")
    truncated = NoteExcerptTruncatedField()
    next_steps = serializers.ListField(child=serializers.CharField())


class ShownSummaryField(serializers.CharField):
    """The result summary, cut to RESULT_SUMMARY_SHOWN_CHARS."""

    def to_representation(self, value: Any) -> str:
        return str(value)[:RESULT_SUMMARY_SHOWN_CHARS]


class SummaryTruncatedField(serializers.BooleanField):
    """Whether the result summary was cut."""

    def get_attribute(self, instance: Any) -> bool:
        return len(instance.result_summary) > RESULT_SUMMARY_SHOWN_CHARS


# Reads an attempt with `latest_notes` and `notes_total` set from `leases.selectors.attempt_notes`.
class AttemptDetailSerializer(AttemptSummarySerializer):
    agent = serializers.CharField(source="agent.handle")
    lease_seconds = serializers.IntegerField()
    claimed_at = serializers.DateTimeField()
    last_renewed_at = serializers.DateTimeField(allow_null=True)
    renew_count = serializers.IntegerField()
    finished_at = serializers.DateTimeField(allow_null=True)
    result_summary = ShownSummaryField(allow_blank=True, help_text="At most 4,000 characters.")
    result_summary_truncated = SummaryTruncatedField()
    next_steps = serializers.ListField(child=serializers.CharField())
    failure_reason_code = BlankAsNullField(allow_null=True)
    interruption_reason_code = BlankAsNullField(allow_null=True)
    revoked_by = BlankAsNullField(allow_null=True)
    revoke_reason = BlankAsNullField(allow_null=True)
    notes = NoteExcerptSerializer(source="latest_notes", many=True, help_text="The latest 50 notes, oldest first.")
    notes_total = serializers.IntegerField()
    spent = SpentSerializer(source="spent_totals", help_text="What this attempt reported spending (SPEC §19).")


class WorkContextSerializer(serializers.Serializer[Any]):
    """The bounded work context (`leases.context.work_context`); at most LEASEHOLD_CONTEXT_MAX_BYTES."""

    landing = serializers.DictField(
        allow_null=True,
        help_text="Why the task's last landing sent it back (SPEC §21.2): `failed_landings` and the landing notes.",
    )
    task = serializers.DictField()
    blockers = serializers.ListField(child=serializers.DictField())
    blockers_total = serializers.IntegerField()
    latest_checkpoint = serializers.DictField(allow_null=True)
    previous_attempt = serializers.DictField(allow_null=True)
    last_failed_attempt = serializers.DictField(
        allow_null=True,
        help_text="The latest failed attempt before the previous one (id, status, agent, finished_at, "
        "failure_reason_code, result_summary), when a later attempt hides it.",
    )
    label = serializers.CharField(allow_null=True)  # type: ignore[assignment]
    git = serializers.DictField(
        allow_null=True,
        help_text="The current attempt's git facts: branch, base_commit, head_commit, commits_ahead, dirty, pushed, "
        "worktree_path, host (null when not reported).",
    )
    predecessor_work = serializers.DictField(
        allow_null=True,
        help_text="Where the work the current attempt continues is: attempt, status, agent, branch, base_commit, "
        "head_commit, commits_ahead, pushed, dirty, host, worktree_path. Null when there is none.",
    )
    environment = serializers.DictField(allow_null=True, help_text="name, kind, isolation, resources, credentials_ref.")
    reservation = serializers.DictField(
        allow_null=True, help_text="The paths the current attempt reserved (paths, mode), SPEC §19; null: none."
    )
    warnings = serializers.ListField(child=serializers.CharField())
    review_findings = serializers.DictField(
        allow_null=True,
        help_text="The latest review's request for changes (review, reviewer, decided_at, summary, findings).",
    )
    review = serializers.DictField(
        allow_null=True,
        help_text="For a review attempt: the request (id, task_version, head_commit) and the work it pins "
        "(work_attempt, worker, result_summary, next_steps, branch, base_commit, and the checks at head_commit).",
    )
    decisions = serializers.ListField(
        child=serializers.DictField(), help_text="Active decisions of the task and project (at most 10)."
    )
    comments = serializers.ListField(child=serializers.DictField(), help_text="The latest 5 comments.")
    checks = serializers.DictField(
        allow_null=True,
        help_text="SPEC §22: the task's head and the latest check results there (name, state, commit, url, "
        "summary cut to 500 characters, reported_by, reported_at); null before any head.",
    )
    truncated = serializers.ListField(child=serializers.CharField(), help_text="Parts that were cut to fit.")


# Reads `{"attempt": the attempt, "task": projections.ended_task_row(task)}`.
class FinishedSerializer(serializers.Serializer[Any]):
    attempt = AttemptSummarySerializer()
    task = CompactTaskSerializer()
