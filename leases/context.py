"""The bounded work context an agent reads before and while it works (SPEC §8).

It carries the task (with description and acceptance criteria), up to 20
unresolved blockers, the latest checkpoint, the previous attempt's summary and
next steps, the current label, git facts and environment, where the work
the current attempt continues is (`predecessor_work`), and warnings. Its JSON stays
within `LEASEHOLD_CONTEXT_MAX_BYTES`: long texts are cut, longest-lived first
(description, then previous summary, checkpoint, acceptance criteria), and
every cut is named in `truncated`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from core.prepared import SAMPLE_INT, Prepared
from leases.context_parts import discussion_parts, landing_part, review_parts
from leases.models import Allocation, Attempt, AttemptKind, AttemptStatus, Note
from leases.selectors import (
    IN_PROGRESS,
    IN_REVIEW,
    latest_checkpoint,
    left_work_on_branch,
    live_attempts,
    predecessor_with_work,
    recent_terminal_attempts,
    unresolved_blocker_count,
    unresolved_blockers_of,
    with_lease_state,
)
from leases.selectors.checks import checks_part, task_head
from leases.services.allocations import active_allocation_of
from leases.services.git_facts import GIT_FACT_FIELDS
from leases.services.path_reservations import PathsClaim, reservation_of
from leases.services.provisioning import provisioned_resources
from ledger import clock
from ledger.models import Task, TaskStatus

MAX_BLOCKERS = 20
PREDECESSOR_FACTS = (
    "branch",
    "base_commit",
    "head_commit",
    "commits_ahead",
    "pushed",
    "dirty",
    "host",
    "worktree_path",
)
TRUNCATION_MARK = "\n[…truncated]"
# Cut in this order: the parts an agent can best re-fetch or least needs whole.
# ("", field) names a top-level field.
CUT_ORDER: tuple[tuple[str, str], ...] = (
    ("task", "description"),
    ("last_failed_attempt", "result_summary"),
    ("previous_attempt", "result_summary"),
    ("previous_attempt", "next_steps"),
    ("latest_checkpoint", "next_steps"),
    ("latest_checkpoint", "content"),
    ("", "blockers"),
    ("", "comments"),
    ("checks", "results"),
    ("", "decisions"),
    ("review_findings", "summary"),
    ("review", "result_summary"),
    ("review_findings", "findings"),
    ("reservation", "paths"),
    ("task", "acceptance_criteria"),
    ("task", "title"),
)
# (text floor in bytes, list floor in items) per pass.
FLOORS: tuple[tuple[int, int], ...] = ((2048, 5), (0, 0))
RUNS_OF_TROUBLE = 3
TROUBLED_STATUSES = (AttemptStatus.FAILED, AttemptStatus.EXPIRED, AttemptStatus.REVOKED)


def encoded_size(value: Any) -> int:
    """Bytes of `value` as the API renders it (compact separators, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


_UNKNOWN: Any = object()


# The first MAX_BLOCKERS + 1 unresolved blockers (one more tells that there are more): compiled once.
_BLOCKERS: Prepared[Any] = Prepared(
    lambda task: unresolved_blockers_of(task).values_list(
        "blocked_by__key", "blocked_by__title", "blocked_by__project_id", "blocked_by__status"
    )[: MAX_BLOCKERS + 1],
    samples=({"task": Task(pk=SAMPLE_INT[0])}, {"task": Task(pk=SAMPLE_INT[1])}),
)


@dataclass(frozen=True)
class _History:
    """What earlier attempts left: the latest checkpoint, the latest ended attempts (newest first),
    and among them the previous one and the last failed one."""

    checkpoint: Note | None
    recent: list[Attempt]
    previous: Attempt | None
    last_failed: Attempt | None


def _history(task: Task, *, first_ever: bool) -> _History:
    """The task's history; a first-ever claim has none to look for. A failure hidden behind a later
    release or hand-off is still worth knowing (issue 13)."""
    if first_ever:
        return _History(checkpoint=None, recent=[], previous=None, last_failed=None)
    checkpoint = latest_checkpoint(task)
    recent = recent_terminal_attempts(task, limit=RUNS_OF_TROUBLE)
    return _History(
        checkpoint=checkpoint,
        recent=recent,
        previous=recent[0] if recent else None,
        last_failed=next((run for run in recent[1:] if run.status == AttemptStatus.FAILED), None),
    )


def _predecessor(
    task: Task, *, current: Attempt | None, recent: list[Attempt], just_claimed: bool, predecessor_id: int | None
) -> Attempt | None:
    """The attempt whose work the current one continues (SPEC §15.4): the one a claim named, else the
    latest with work on the current attempt's branch."""
    if just_claimed:
        return _known_attempt(predecessor_id, recent)
    predecessor = _latest_with_work(task, recent)
    if predecessor is not None and current is not None and predecessor.branch != current.branch:
        return None  # the current attempt did not continue that work
    return predecessor


def _task_section(task: Task, *, current: Attempt | None, now: datetime) -> dict[str, Any]:
    """The task, with its effective status: in progress while the current lease lives (in review
    for a review attempt)."""
    effective_status = task.status
    if current is not None and current.lease_expires_at > now:
        effective_status = IN_REVIEW if current.kind == AttemptKind.REVIEW else IN_PROGRESS
    return {
        "key": task.key,
        "title": task.title,
        "status": task.status,
        "effective_status": effective_status,
        "priority": task.priority,
        "task_class": task.task_class,
        "version": task.version,
        "epoch": task.epoch,
        "description": task.description,
        "acceptance_criteria": task.acceptance_criteria,
    }


def _checkpoint(checkpoint: Note | None) -> dict[str, Any] | None:
    """The latest checkpoint an earlier attempt wrote."""
    if checkpoint is None:
        return None
    return {
        "attempt": checkpoint.attempt_id,
        "agent": checkpoint.attempt.agent.handle,
        "created_at": clock.iso(checkpoint.created_at),
        "content": checkpoint.content,
        "next_steps": checkpoint.next_steps,
    }


def _previous_attempt(previous: Attempt | None) -> dict[str, Any] | None:
    """How the latest ended attempt ended, its summary and next steps."""
    if previous is None:
        return None
    return {
        "id": previous.pk,
        "status": previous.status,
        "agent": previous.agent.handle,
        "epoch": previous.epoch,
        "finished_at": clock.iso(previous.finished_at),
        "result_summary": previous.result_summary,
        "next_steps": previous.next_steps,
        "branch": previous.branch or None,
        "base_commit": previous.base_commit or None,
        "failure_reason_code": previous.failure_reason_code or None,
        "interruption_reason_code": previous.interruption_reason_code or None,
    }


def _last_failed_attempt(last_failed: Attempt | None) -> dict[str, Any] | None:
    """The last failure among the recent attempts, when the latest one is not it."""
    if last_failed is None:
        return None
    return {
        "id": last_failed.pk,
        "status": last_failed.status,
        "agent": last_failed.agent.handle,
        "finished_at": clock.iso(last_failed.finished_at),
        "failure_reason_code": last_failed.failure_reason_code or None,
        "result_summary": last_failed.result_summary,
    }


def _add_discussion(
    context: dict[str, Any], *, task: Task, current: Attempt | None, first_ever: bool, known_empty: frozenset[str]
) -> None:
    """SPEC §16: review findings (or the review a reviewer holds), decisions, comments; each part
    bounded on its own, its cuts named in `truncated`."""
    reviewing = review_parts(task, current) if not first_ever else {"review_findings": None, "review": None, "cut": []}
    discussion = discussion_parts(task, known_empty=known_empty)
    context.update({name: reviewing[name] for name in ("review_findings", "review")})
    context.update({name: discussion[name] for name in ("decisions", "comments")})
    context["truncated"].extend([*reviewing["cut"], *discussion["cut"]])


def work_context(
    *,
    task: Task,
    now: datetime,
    attempt: Attempt | None = None,
    allocation: Allocation | None = _UNKNOWN,
    just_claimed: bool = False,
    predecessor_id: int | None = None,
    reservation: PathsClaim | None = _UNKNOWN,
    known_empty: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The work context of `task`.

    `attempt` is the caller's own attempt, if it holds one; a caller that
    already knows that attempt's allocation (a claim) passes it to save a query.
    A claim passes `just_claimed`: its attempt has no notes yet, and at epoch 1
    the task had no attempt before it, so there is no checkpoint and no
    previous attempt to look for; and `predecessor_id`, the attempt whose
    branch it inherited (None: it inherited none), and the paths it reserved
    (SPEC §19: the agent's own reservation is named in `reservation`), and
    `known_empty`, the parts its transaction found nothing of ("blockers",
    "decisions", "comments"), which are then not read again.
    """
    current = attempt or live_attempts(now).filter(task=task).select_related("agent").first()
    blockers = [] if "blockers" in known_empty else _BLOCKERS.rows(task=task)
    first_ever = just_claimed and attempt is not None and attempt.epoch == 1
    history = _history(task, first_ever=first_ever)
    if allocation is _UNKNOWN:
        allocation = active_allocation_of(current) if current is not None else None
    if reservation is _UNKNOWN:
        reservation = reservation_of(current) if current is not None else None
    predecessor = _predecessor(
        task, current=current, recent=history.recent, just_claimed=just_claimed, predecessor_id=predecessor_id
    )
    context: dict[str, Any] = {
        # SPEC §21.2: a failed landing's reason comes first.
        "landing": landing_part(task, recent=history.recent, first_ever=first_ever),
        "task": _task_section(task, current=current, now=now),
        "blockers": _blockers(task, blockers[:MAX_BLOCKERS], now=now),
        "blockers_total": len(blockers) if len(blockers) <= MAX_BLOCKERS else unresolved_blocker_count(task),
        "latest_checkpoint": _checkpoint(history.checkpoint),
        "previous_attempt": _previous_attempt(history.previous),
        "last_failed_attempt": _last_failed_attempt(history.last_failed),
        "label": current.label if current is not None else None,
        "git": None if current is None else {name: _fact(current, name) for name in GIT_FACT_FIELDS},
        "predecessor_work": _predecessor_work(predecessor),
        "environment": _environment(allocation),
        "reservation": None if reservation is None else {"paths": list(reservation.paths), "mode": reservation.mode},
        "warnings": _warnings(task, history.recent),
        # SPEC §22: the latest check results at the task's head.
        "checks": checks_part(task.project_id, _head(task, current=current, recent=history.recent)),
        "truncated": [],
    }
    _add_discussion(context, task=task, current=current, first_ever=first_ever, known_empty=known_empty)
    return bound_context(context, max_bytes=settings.LEASEHOLD_CONTEXT_MAX_BYTES)


def _blockers(task: Task, rows: list[tuple[str, str, int, str]], *, now: datetime) -> list[dict[str, Any]]:
    """Blockers of the task's own project by key and title; another project's as a stub (SPEC §22): its
    key and effective status only, whoever reads the context (one more statement, only when there is one)."""
    foreign = [key for key, _title, project_id, _status in rows if project_id != task.project_id]
    effective: dict[str, str] = {}
    if foreign:
        stubs: Any = with_lease_state(Task.objects.filter(key__in=foreign), now=now)
        effective = dict(stubs.values_list("key", "effective_status"))
    return [
        {"key": key, "title": title}
        if project_id == task.project_id
        else {"key": key, "effective_status": effective.get(key, status), "stub": True}
        for key, title, project_id, status in rows
    ]


def _head(task: Task, *, current: Attempt | None, recent: list[Attempt]) -> str | None:
    """`leases.selectors.checks.task_head` from the attempts in hand; a query only when the latest
    RUNS_OF_TROUBLE ended attempts and the live one reported no head (a first claim reads none)."""
    if task.status in (TaskStatus.DELIVERED, TaskStatus.DONE) and task.delivered_commit:
        return task.delivered_commit
    for attempt in (current, *recent):
        if attempt is not None and attempt.kind == AttemptKind.WORK and attempt.head_commit:
            return attempt.head_commit
    if len(recent) < RUNS_OF_TROUBLE:
        return task.delivered_commit or None
    return task_head(task)


def _fact(attempt: Attempt, name: str) -> Any:
    value = getattr(attempt, name)
    return None if value == "" else value


def _known_attempt(attempt_id: int | None, recent: list[Attempt]) -> Attempt | None:
    """The attempt `attempt_id`, from the recent attempts already read when it is one of them."""
    if attempt_id is None:
        return None
    known = next((attempt for attempt in recent if attempt.pk == attempt_id), None)
    return known or Attempt.objects.select_related("agent").filter(pk=attempt_id).first()


def _latest_with_work(task: Task, recent: list[Attempt]) -> Attempt | None:
    """The latest ended attempt that left work on its branch, from the recent ones already read when it is one.

    Only when none of them qualifies and older ones exist is the rule asked of the database.
    """
    for attempt in recent:
        if left_work_on_branch(
            status=attempt.status,
            branch=attempt.branch,
            commits_ahead=attempt.commits_ahead,
            seen_commits_ahead=attempt.seen_commits_ahead,
            kind=attempt.kind,
        ):
            return attempt
    if len(recent) < RUNS_OF_TROUBLE:
        return None  # every ended attempt of the task was among them
    return predecessor_with_work(task, before=recent[-1])


def _predecessor_work(attempt: Attempt | None) -> dict[str, Any] | None:
    """Where the work a new attempt continues is (SPEC §15.4): branch, head, pushed, host, worktree."""
    if attempt is None:
        return None
    return {
        "attempt": attempt.pk,
        "status": attempt.status,
        "agent": attempt.agent.handle,
        **{name: _fact(attempt, name) for name in PREDECESSOR_FACTS},
    }


def _environment(allocation: Allocation | None) -> dict[str, Any] | None:
    if allocation is None:
        return None
    environment = allocation.environment
    return {
        "name": environment.name,
        "kind": environment.kind,
        "isolation": environment.isolation,
        # What a runner's provider made for this attempt (SPEC §23.3) over what the catalogue declares.
        "resources": {**environment.resources, **provisioned_resources(allocation.provisioned)},
        "credentials_ref": environment.credentials_ref or None,
    }


def _warnings(task: Task, recent: list[Attempt]) -> list[str]:
    statuses = [attempt.status for attempt in recent]
    warnings = []
    if len(statuses) == RUNS_OF_TROUBLE and all(status in TROUBLED_STATUSES for status in statuses):
        warnings.append(
            f"The last {RUNS_OF_TROUBLE} attempts ended {', '.join(statuses)}: read the checkpoint and "
            "previous attempt before repeating their approach."
        )
    if task.reserved_for_id is not None:
        warnings.append("This task is reserved for one agent by an admin.")
    return warnings


def _cut(text: str, excess: int) -> str:
    """`text` shortened by at least `excess` bytes (UTF-8, whole characters), with a mark."""
    encoded = text.encode()
    keep = max(0, len(encoded) - excess - len(TRUNCATION_MARK.encode()))
    return encoded[:keep].decode(errors="ignore") + TRUNCATION_MARK


def bound_context(context: dict[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """Cut long parts, in CUT_ORDER, until the context's JSON fits in `max_bytes`.

    Two passes: the first cuts each part down to a floor (so the description
    is never emptied just because the checkpoint is long too), the second
    cuts without one. Texts lose their tail (with a visible mark); lists lose
    their last items. Each part cut is named once in `truncated`.
    """
    # A text longer than the whole budget can never fit: cut it to the budget
    # first, so the loop below never re-encodes a megabyte.
    for section, field in CUT_ORDER:
        owner = context if section == "" else context.get(section)
        value = owner.get(field) if owner else None
        if owner and isinstance(value, str) and len(value) > max_bytes:
            owner[field] = _cut(value, len(value.encode()) - max_bytes)
            context["truncated"].append(f"{section}.{field}" if section else field)
    for text_floor, list_floor in FLOORS:
        for section, field in CUT_ORDER:
            owner = context if section == "" else context.get(section)
            if not owner:
                continue
            while (excess := encoded_size(context) - max_bytes) > 0:
                value = owner.get(field)
                if isinstance(value, list) and len(value) > list_floor:
                    owner[field] = value[:-1]
                elif isinstance(value, str) and len(value.encode()) > text_floor:
                    # JSON escaping can make a character cost more than its UTF-8
                    # bytes; cut a margin more and loop while still over.
                    room = max(text_floor, len(value.encode()) - excess - 64)
                    shorter = _cut(value, len(value.encode()) - room)
                    owner[field] = shorter if len(shorter) < len(value) else ""
                else:
                    break
                path = f"{section}.{field}" if section else field
                if path not in context["truncated"]:
                    context["truncated"].append(path)
            if encoded_size(context) <= max_bytes:
                return context
    return context
