"""Ending a lease by its holder: finish with an outcome, or release (SPEC §3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from core.combined import writes_combined
from core.errors import AcknowledgementRequired, InvalidStatusTransition, LedgerError, ValidationFailed
from leases.labels import parse_label
from leases.models import Attempt, AttemptKind, AttemptStatus, FailureReason, InterruptionReason
from leases.services.allocations import release_allocations
from leases.services.delivering import task_deliver
from leases.services.ending import end_attempt, task_claimable_again
from leases.services.git_facts import GitFacts, git_facts, record_git_facts
from leases.services.holding import HolderProof, held_attempt, refusals_after_commit
from leases.services.notes import validate_next_steps
from leases.services.quarantine import quarantine_failing
from leases.services.reviews import ReviewOutcome, review_attempt_finish, review_open, validate_review_decision
from leases.services.usage import Usage, record_usage, validate_usage
from ledger import clock
from ledger.actors import Actor
from ledger.models import Event, EventType, Task, TaskStatus
from ledger.services import ACKNOWLEDGED_FIELDS, apply_task_update, event_append


class Outcome:
    DONE = "done"
    REVIEW = "review"
    FAILED = "failed"
    HANDOFF = "handoff"
    ALL = (DONE, REVIEW, FAILED, HANDOFF)
    # A review attempt's decisions (SPEC §16.1); it may also fail or hand off, leaving the review open.
    APPROVED = ReviewOutcome.APPROVED
    CHANGES_REQUESTED = ReviewOutcome.CHANGES_REQUESTED
    BLOCKED = ReviewOutcome.BLOCKED
    REVIEW_DECISIONS = ReviewOutcome.ALL
    FOR_REVIEW_ATTEMPTS = (APPROVED, CHANGES_REQUESTED, BLOCKED, FAILED, HANDOFF)


def _acknowledgement_needed(attempt: Attempt, task: Task) -> list[str]:
    """Which of description, acceptance criteria, status changed since the claim."""
    if task.version == attempt.task_version_at_claim:
        return []
    changed: set[str] = set()
    events = Event.objects.filter(
        task=task,
        type__in=(EventType.TASK_UPDATED, EventType.TASK_STATUS_CHANGED),
        id__gt=attempt.event_id_at_claim or 0,
    ).values_list("type", "payload")
    for event_type, payload in events:
        if event_type == EventType.TASK_STATUS_CHANGED:
            changed.add("status")
        else:
            changed.update(set(payload.get("fields", ())) & ACKNOWLEDGED_FIELDS)
    return sorted(changed)


def _validate_finish(
    outcome: str, failure_reason_code: str | None, interruption_reason_code: str | None
) -> tuple[str, str]:
    if outcome not in (*Outcome.ALL, *Outcome.REVIEW_DECISIONS):
        raise ValidationFailed(f"outcome must be one of {', '.join((*Outcome.ALL, *Outcome.REVIEW_DECISIONS))}.")
    failure = failure_reason_code or ""
    interruption = interruption_reason_code or ""
    if outcome == Outcome.FAILED and failure not in FailureReason.values:
        raise ValidationFailed(
            f"A failed outcome needs failure_reason_code, one of {', '.join(FailureReason.values)}.",
            details={"fields": {"failure_reason_code": ["required for failed"]}},
        )
    if outcome != Outcome.FAILED and failure:
        raise ValidationFailed("failure_reason_code is only for the failed outcome.")
    if outcome == Outcome.HANDOFF and interruption not in InterruptionReason.values:
        raise ValidationFailed(
            f"A handoff needs interruption_reason_code, one of {', '.join(InterruptionReason.values)}.",
            details={"fields": {"interruption_reason_code": ["required for handoff"]}},
        )
    if outcome != Outcome.HANDOFF and interruption:
        raise ValidationFailed("interruption_reason_code is only for the handoff outcome.")
    return failure, interruption


def _claimed_an_environment(attempt: Attempt) -> bool:
    """Whether the attempt may hold an allocation to release, known without a query.

    Only the claim allocates, and it names the environment in the label it
    writes (SPEC §5, §6); later label rewrites keep that field. A label that
    does not parse (not written by this server) is taken to hold one.
    """
    try:
        return parse_label(attempt.label).env is not None
    except ValidationFailed:
        return True


@dataclass(frozen=True)
class Finished:
    attempt: Attempt
    task: Task
    # The task's unresolved blockers, when the lock statement read them (a finish; issue 34).
    blocked_by: int | None = None


@dataclass(frozen=True)
class _FinishRequest:
    """What the holder asked for, validated before the attempt is read."""

    outcome: str
    result_summary: str
    next_steps: list[str]
    failure: str
    interruption: str
    facts: GitFacts
    findings: list[str]
    spent: Usage | None

    @property
    def decision(self) -> bool:
        """Whether the outcome is a review's decision (SPEC §16.1)."""
        return self.outcome in Outcome.REVIEW_DECISIONS


def _validated_request(
    *,
    outcome: str,
    result_summary: Any,
    next_steps: Sequence[str],
    failure_reason_code: str | None,
    interruption_reason_code: str | None,
    git: Mapping[str, Any] | None,
    findings: Sequence[str] | None,
    usage: Any,
) -> _FinishRequest:
    """Every bound of the request that needs no row, checked first: the outcome and its reason code,
    the git facts, next steps, summary, findings (only for a review decision, SPEC §16.1), usage."""
    failure, interruption = _validate_finish(outcome, failure_reason_code, interruption_reason_code)
    facts = git_facts(git)
    steps = validate_next_steps(next_steps)
    if not isinstance(result_summary, str):
        raise ValidationFailed("result_summary must be a string.")
    decision = outcome in Outcome.REVIEW_DECISIONS
    if findings is not None and not decision:
        raise ValidationFailed("findings are only for a review decision.", details={"fields": {"findings": ["unused"]}})
    cleaned_findings: list[str] = []
    if decision:
        result_summary, cleaned_findings = validate_review_decision(outcome, result_summary, findings or [])
    spent = validate_usage(usage)
    return _FinishRequest(outcome, result_summary, steps, failure, interruption, facts, cleaned_findings, spent)


def _refuse_finishing_cancelled(task: Task, *, outcome: str) -> None:
    """A task cancelled under its holder is never done or in review (SPEC §3). Said before the
    acknowledgement: no version makes cancelled → done/review allowed."""
    if task.status == TaskStatus.CANCELLED and outcome in (Outcome.DONE, Outcome.REVIEW):
        raise InvalidStatusTransition(
            f"{task.key} was cancelled while you held it: release the attempt, or finish it as failed or handoff.",
            details={"from": task.status, "to": outcome, "task_status": task.status, "outcomes": ["failed", "handoff"]},
        )


def _refuse_outcome_of_other_kind(held: Attempt, *, outcome: str) -> None:
    """A work attempt finishes with a work outcome; a review attempt with a decision, or fails or
    hands off (SPEC §16.1)."""
    reviewing = held.kind == AttemptKind.REVIEW
    decision = outcome in Outcome.REVIEW_DECISIONS
    if reviewing != decision and not (reviewing and outcome in Outcome.FOR_REVIEW_ATTEMPTS):
        allowed = Outcome.FOR_REVIEW_ATTEMPTS if reviewing else Outcome.ALL
        raise ValidationFailed(
            f"A {held.kind} attempt finishes with one of {', '.join(allowed)}.",
            details={"fields": {"outcome": list(allowed)}, "kind": held.kind},
        )


def _refuse_unacknowledged(held: Attempt, task: Task, *, acknowledged_version: int | None) -> None:
    """Work finished on a task whose description, acceptance criteria or status changed since the
    claim must say it read the current version (SPEC §3): ACKNOWLEDGEMENT_REQUIRED otherwise."""
    changed = _acknowledgement_needed(held, task)
    if changed and acknowledged_version != task.version:
        raise AcknowledgementRequired(
            f"{task.key} changed since your claim ({', '.join(changed)}); re-read it and finish with "
            f"acknowledged_version={task.version}.",
            details={"current_version": task.version, "changed": changed},
        )


def _record_final_facts(held: Attempt, request: _FinishRequest, *, now: datetime, actor: Actor) -> None:
    """Before the attempt ends: count its usage (never refused, SPEC §19), record its final git
    facts (SPEC §15.4) and release its environment."""
    if request.spent is not None:
        record_usage(held, request.spent, now=now, actor=actor)
    if request.facts.given():
        record_git_facts(held, request.facts, now=now, actor=actor)
    if _claimed_an_environment(held):
        release_allocations(held, now=now, actor=actor)


def _finish_review_decision(
    held: Attempt, task: Task, request: _FinishRequest, *, now: datetime
) -> Finished | LedgerError:
    """A review attempt's decision, decided by `leases.services.reviews` (SPEC §16.1)."""
    _record_final_facts(held, request, now=now, actor=Actor(agent=held.agent))
    decided = review_attempt_finish(
        held, task=task, outcome=request.outcome, summary=request.result_summary, findings=request.findings, now=now
    )
    return decided if isinstance(decided, LedgerError) else Finished(attempt=held, task=decided)


def _apply_task_outcome(held: Attempt, task: Task, *, outcome: str, now: datetime, actor: Actor) -> Task:
    """The task after its attempt ended: done or in review (a review requested), else claimable again."""
    if outcome not in (Outcome.DONE, Outcome.REVIEW):
        return task_claimable_again(task, now=now)
    if outcome == Outcome.DONE and task.project.landing_on:
        return task_deliver(
            locked=task,
            attempt=held,
            branch=held.branch,
            head=held.head_commit,
            pushed=held.pushed,
            actor=actor,
            now=now,
        )
    target = TaskStatus.DONE if outcome == Outcome.DONE else TaskStatus.REVIEW
    task, _ = apply_task_update(locked=task, actor=actor, changes={"status": target}, now=now)
    if outcome == Outcome.REVIEW:
        review_open(work_attempt=held, task=task, now=now, actor=actor)
    return task


_ATTEMPT_STATUS_OF = {
    Outcome.DONE: AttemptStatus.COMPLETED,
    Outcome.REVIEW: AttemptStatus.COMPLETED,
    Outcome.FAILED: AttemptStatus.FAILED,
    Outcome.HANDOFF: AttemptStatus.INTERRUPTED,
}


def _finish_work(held: Attempt, task: Task, request: _FinishRequest, *, now: datetime) -> Finished:
    """End the attempt with a work outcome (or a review attempt's failure or hand-off), move the task,
    append `attempt.finished`; a failed work attempt may complete a quarantining streak (SPEC §16.4)."""
    outcome = request.outcome
    status = _ATTEMPT_STATUS_OF[outcome]
    actor = Actor(agent=held.agent)
    _record_final_facts(held, request, now=now, actor=actor)
    # On PostgreSQL the attempt's end, the task's update and the events go out as one statement
    # (a finish `done`: the attempt, the task, `task.status_changed` and `attempt.finished` in one).
    with writes_combined():
        end_attempt(
            held,
            now=now,
            status=status,
            result_summary=request.result_summary,
            next_steps=request.next_steps,
            failure_reason_code=request.failure,
            interruption_reason_code=request.interruption,
        )
        task = _apply_task_outcome(held, task, outcome=outcome, now=now, actor=actor)
        event_append(
            type=EventType.ATTEMPT_FINISHED,
            actor=actor,
            at=now,
            task=task,
            attempt_id=held.pk,
            payload={
                "outcome": outcome,
                "status": status,
                "failure_reason_code": request.failure or None,
                "interruption_reason_code": request.interruption or None,
            },
        )
    if outcome == Outcome.FAILED and held.kind != AttemptKind.REVIEW:
        task = quarantine_failing([task.pk], now=now).get(task.pk, task)
    return Finished(attempt=held, task=task)


@refusals_after_commit
def attempt_finish(
    *,
    proof: HolderProof,
    outcome: str,
    result_summary: str = "",
    next_steps: Sequence[str] = (),
    failure_reason_code: str | None = None,
    interruption_reason_code: str | None = None,
    acknowledged_version: int | None = None,
    git: Mapping[str, Any] | None = None,
    findings: Sequence[str] | None = None,
    usage: Any = None,
) -> Finished | LedgerError:
    """End the attempt with an outcome (SPEC §3).

    done → completed, task done; review → completed, task review; failed →
    failed, task stays ready; handoff → interrupted, task stays ready. If the
    task's description, acceptance criteria or status changed since the
    claim, `acknowledged_version` must equal the current version. `git`
    records the final git facts first (SPEC §15.4), in the same transaction.

    A review attempt (SPEC §16.1) finishes with approved / changes_requested /
    blocked (and `findings`), decided by `leases.services.reviews`; or fails or
    hands off like work, leaving its review to be claimed again. A work
    attempt that fails may complete a streak that quarantines its task (§16.4).
    `usage` is counted; finishing is never refused for a spent budget (SPEC §19).
    """
    request = _validated_request(
        outcome=outcome,
        result_summary=result_summary,
        next_steps=next_steps,
        failure_reason_code=failure_reason_code,
        interruption_reason_code=interruption_reason_code,
        git=git,
        findings=findings,
        usage=usage,
    )
    now = clock.now()
    held = held_attempt(proof, now=now, lock_task=True, count_blockers=True)
    if isinstance(held, LedgerError):
        return held
    task = held.task
    _refuse_finishing_cancelled(task, outcome=outcome)
    _refuse_outcome_of_other_kind(held, outcome=outcome)
    if request.decision:
        finished = _finish_review_decision(held, task, request, now=now)
    else:
        _refuse_unacknowledged(held, task, acknowledged_version=acknowledged_version)
        finished = _finish_work(held, task, request, now=now)
    return (
        finished
        if isinstance(finished, LedgerError)
        else replace(finished, blocked_by=getattr(held, "task_blocked_by", None))
    )


@refusals_after_commit
def attempt_release(*, proof: HolderProof, reason: str = "") -> Finished | LedgerError:
    """Give the task back untouched: the attempt is released, the task stays as it is."""
    now = clock.now()
    held = held_attempt(proof, now=now, lock_task=True)
    if isinstance(held, LedgerError):
        return held
    if _claimed_an_environment(held):
        release_allocations(held, now=now, actor=Actor(agent=held.agent))
    end_attempt(held, now=now, status=AttemptStatus.RELEASED)
    task = task_claimable_again(held.task, now=now)
    event_append(
        type=EventType.ATTEMPT_RELEASED,
        actor=Actor(agent=held.agent),
        at=now,
        task=task,
        attempt_id=held.pk,
        payload={"reason": reason[:500]} if reason else {},
    )
    return Finished(attempt=held, task=task)
