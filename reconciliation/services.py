"""Reconciliation runs (SPEC §7); the admin's triage services live in `triage` and are re-exported here.

A run reads the clock once, then: records itself (a short write), reads the
ledger (short queries), reads git per project with no transaction open,
writes the findings in one short transaction, and only then — if asked —
prunes removable worktrees. Slow git never holds a lock a claim could need.

A repository that cannot be read is an error on the run, and the git
conditions of that project are neither opened nor resolved by that run: a
failed read proves nothing. Everything else still reconciles.

Safe to run twice at once: findings are upserted under the partial unique
index and resolved by compare-and-set, so each gets one `finding.opened` and
one `finding.resolved`; a run that finds a newer run's findings already
committed writes none of its own (it is `superseded`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from core.db import write_transaction
from leases.models import Attempt
from leases.selectors import live_reservations
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import EventType, PathsMode, Project, Severity
from ledger.services import event_append
from reconciliation import conditions, git_conditions
from reconciliation.conditions import Observation
from reconciliation.git import GitError
from reconciliation.git_conditions import RepositoryView, is_landed_and_removable
from reconciliation.landed import LandedOutside, delivered_by_project, landed_outside
from reconciliation.models import (
    GIT_CONDITIONS,
    GIT_INFORMED_CONDITIONS,
    UNRESOLVED_FINDING_STATUSES,
    Condition,
    Finding,
    ReconciliationRun,
    RunStatus,
)
from reconciliation.pruning import prune_worktrees as prune_removable_worktrees
from reconciliation.snapshot import LedgerSnapshot, branch_deliveries, branch_histories, read_ledger
from reconciliation.triage import (
    RECONCILIATION_ACTOR,
    attempt_discard,
    finding_acknowledge,
    finding_resolve,
    resolve_finding_locked,
)

__all__ = ["attempt_discard", "finding_acknowledge", "finding_resolve", "reconcile"]

logger = logging.getLogger(__name__)

LEDGER_CONDITIONS: frozenset[str] = frozenset(Condition.values) - GIT_CONDITIONS - GIT_INFORMED_CONDITIONS

Scope = tuple[str, int]  # (condition, project id) evaluated by a run
# What the doors pass to land delivered tasks found in their target (`landing.services.tasks_landed_outside`).
LandOutside = Callable[[LandedOutside], object]


def reconcile(*, prune_worktrees: bool = False, land_outside: LandOutside | None = None) -> ReconciliationRun:
    """Run every condition over every project once; return the finished run.

    With `land_outside` (the doors pass `landing.services.tasks_landed_outside`, a room this one may
    not import), delivered tasks whose head git finds in their target are handed to it first, so
    this run already sees them landed (SPEC §21.2).
    """
    now = clock.now()
    started = time.monotonic()
    run = ReconciliationRun.objects.create(started_at=now, prune_worktrees=prune_worktrees)
    try:
        landing_errors: list[dict[str, Any]] = []
        if land_outside is not None:
            landed, landing_errors = landed_outside(delivered_by_project())
            if landed:
                land_outside(landed)
        snapshot = read_ledger(now=now)
        observations, scopes, errors, seen = _observe(snapshot, now=now)
        errors = [*errors, *_new_errors(landing_errors, errors)]
        landed_worktrees = [o for o in observations if is_landed_and_removable(o)]
        observations = [o for o in observations if not is_landed_and_removable(o)]
        status = _record(run_id=run.pk, observations=observations, scopes=scopes, errors=errors, now=now)
        if seen and status != RunStatus.SUPERSEDED:
            _record_work_seen(seen, now=now)
        pruned: list[str] = []
        if prune_worktrees:
            pruned, prune_errors = prune_removable_worktrees(
                snapshot=snapshot, observations=[*observations, *landed_worktrees], now=now
            )
            errors = [*errors, *prune_errors]
        _finish(run, status=status, errors=errors, pruned=pruned, finished_at=_finished_at(now, started))
    except Exception as exc:
        failure = [{"project": None, "message": f"{type(exc).__name__}: {exc}"[:500]}]
        try:
            _finish(run, status=RunStatus.FAILED, errors=failure, pruned=[], finished_at=_finished_at(now, started))
        except Exception:  # the database itself may be what failed; the original error matters more
            logger.exception("could not record the failure of reconciliation run %s", run.pk)
        raise
    run.refresh_from_db()
    return run


def _new_errors(extra: list[dict[str, Any]], errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The landing pass's errors, less those of a project whose repository the run could not read at all."""
    unreadable = {error.get("project") for error in errors}
    return [error for error in extra if error.get("project") not in unreadable]


def _finished_at(now: datetime, started: float) -> datetime:
    """The run's clock reading plus its measured duration: one timeline, one clock read."""
    return now + timedelta(seconds=time.monotonic() - started)


def _observe(
    snapshot: LedgerSnapshot, *, now: datetime
) -> tuple[list[Observation], set[Scope], list[dict[str, Any]], dict[int, int]]:
    """Evaluate every condition; git is read here, with no transaction open.

    Also returns the commits seen on ended attempts' branches (`work_seen`),
    for `_record_work_seen`.
    """
    silence = timedelta(seconds=settings.LEASEHOLD_AGENT_SILENCE_SECONDS)
    stall = timedelta(seconds=settings.LEASEHOLD_STALL_SECONDS)
    attempts, allocations = snapshot.active_attempts, snapshot.allocations
    observations = [
        *conditions.expired_lease_still_active(attempts, now=now),
        *conditions.duplicate_branch_label(attempts, now=now),
        *conditions.leaked_environment(allocations),
        *conditions.environment_collision(allocations),
        *conditions.insufficient_isolation(allocations),
    ]
    scopes: set[Scope] = {(condition, project.id) for condition in LEDGER_CONDITIONS for project in snapshot.projects}
    errors: list[dict[str, Any]] = []
    activity: dict[tuple[int, str], datetime] = {}
    seen: dict[int, int] = {}
    unreadable: set[int] = set()
    for project in snapshot.projects:
        if project.archived or not project.reads_git:
            continue  # an archived project's repository may be long gone; its git findings stay as they are
        try:
            view = RepositoryView(project)
            observations.extend(_observe_git(view, snapshot, now=now))
            seen.update(git_conditions.work_seen(view, snapshot.ended_attempts))
        except GitError as exc:
            errors.append({"project": project.slug, "repository": project.repository, "message": str(exc)})
            unreadable.add(project.id)
            continue
        activity.update(git_conditions.branch_activity(view))
        scopes.update((condition, project.id) for condition in GIT_CONDITIONS)
    informed = [attempt for attempt in attempts if attempt.project_id not in unreadable]
    observations.extend(conditions.live_lease_dead_agent(informed, now=now, silence=silence, activity=activity))
    observations.extend(conditions.stalled_attempt(informed, now=now, stall=stall, activity=activity))
    scopes.update(
        (condition, project.id)
        for condition in GIT_INFORMED_CONDITIONS
        for project in snapshot.projects
        if project.id not in unreadable
    )
    return observations, scopes, errors, seen


def _observe_git(view: RepositoryView, snapshot: LedgerSnapshot, *, now: datetime) -> list[Observation]:
    """The git conditions of one project."""
    project = view.project
    worktrees = view.worktrees()
    named = set(view.heads) | {worktree.branch for worktree in worktrees if worktree.branch}
    histories = branch_histories(project_id=project.id, branches=named)
    deliveries = branch_deliveries(project_id=project.id, branches=named)
    live_branches = {
        attempt.branch for attempt in snapshot.live_attempts(now) if attempt.project_id == project.id and attempt.branch
    }
    return [
        *git_conditions.branch_missing(view, snapshot.active_attempts, now=now),
        *git_conditions.orphan_branch(view, histories, deliveries),
        *git_conditions.orphan_worktree(view, worktrees, histories, live_branches=live_branches, deliveries=deliveries),
        *git_conditions.completed_branch_missing(view, snapshot.ended_attempts, now=now),
        *git_conditions.unreserved_change(view, snapshot.ended_attempts, _live_exclusive_reservations(project.id, now)),
    ]


def _live_exclusive_reservations(project_id: int, now: datetime) -> list[git_conditions.LiveReservation]:
    rows = (
        live_reservations(project=Project(pk=project_id), now=now)
        .filter(mode=PathsMode.EXCLUSIVE)
        .values_list("attempt_id", "attempt__task_id", "attempt__task__key", "paths")
    )
    return [git_conditions.LiveReservation(*row) for row in rows]


@write_transaction
def _record_work_seen(seen: dict[int, int], *, now: datetime) -> None:
    """Record the commits seen beyond each ended attempt's base: evidence of work a claim inherits.

    Compare-and-set per attempt, one `attempt.updated` each; two runs at
    once record each change once.
    """
    for attempt in Attempt.objects.filter(pk__in=seen).select_related("task__project").order_by("id"):
        count = seen[attempt.pk]
        if Attempt.objects.filter(pk=attempt.pk).exclude(seen_commits_ahead=count).update(seen_commits_ahead=count):
            event_append(
                type=EventType.ATTEMPT_UPDATED,
                actor=SYSTEM,
                at=now,
                task=attempt.task,
                attempt_id=attempt.pk,
                payload={"seen_commits_ahead": count},
            )


def _counts(observations: Iterable[Observation]) -> dict[str, int]:
    counts = dict.fromkeys(Condition.values, 0)
    for observation in observations:
        counts[observation.condition] += 1
    return counts


@write_transaction
def _record(
    *,
    run_id: int,
    observations: list[Observation],
    scopes: set[Scope],
    errors: list[dict[str, Any]],
    now: datetime,
) -> str:
    """Open, refresh and resolve findings in one short transaction; returns the run's status."""
    counts = _counts(observations)
    superseded = ReconciliationRun.objects.filter(
        pk__gt=run_id, status__in=(RunStatus.SUCCEEDED, RunStatus.PARTIAL)
    ).exists()
    if superseded:
        ReconciliationRun.objects.filter(pk=run_id).update(status=RunStatus.SUPERSEDED, counts=counts, errors=errors)
        return RunStatus.SUPERSEDED
    unresolved = {_finding_key(f): f for f in Finding.objects.filter(status__in=UNRESOLVED_FINDING_STATUSES)}
    opened = 0
    refreshed: list[int] = []
    for observation in observations:
        existing = unresolved.get(observation.key)
        if existing is None:
            existing, created = _open(observation, now=now)
            opened += created
        if existing.detail != observation.detail:
            Finding.objects.filter(pk=existing.pk).update(detail=observation.detail)
        refreshed.append(existing.pk)
    Finding.objects.filter(pk__in=refreshed).update(last_seen_at=now)
    observed = {observation.key for observation in observations}
    resolved = 0
    for key, finding in unresolved.items():
        if key not in observed and (finding.condition, finding.project_id) in scopes:
            resolved += resolve_finding_locked(finding, actor=SYSTEM, by=RECONCILIATION_ACTOR, now=now)
    ReconciliationRun.objects.filter(pk=run_id).update(
        status=RunStatus.PARTIAL if errors else RunStatus.SUCCEEDED,
        counts=counts,
        opened=opened,
        resolved=resolved,
        errors=errors,
    )
    return RunStatus.PARTIAL if errors else RunStatus.SUCCEEDED


def _finding_key(finding: Finding) -> tuple[int, str, str, str]:
    return (finding.project_id, finding.condition, finding.subject_type, finding.subject_key)


def _open(observation: Observation, *, now: datetime) -> tuple[Finding, bool]:
    """Insert the finding; if a concurrent run inserted it first, that one is the finding."""
    try:
        with transaction.atomic():
            finding = Finding.objects.create(
                condition=observation.condition,
                project_id=observation.project_id,
                subject_type=observation.subject_type,
                subject_key=observation.subject_key,
                task_id=observation.task_id,
                attempt_id=observation.attempt_id,
                environment_id=observation.environment_id,
                detail=observation.detail,
                first_seen_at=now,
                last_seen_at=now,
            )
    except IntegrityError:
        existing = Finding.objects.get(
            project_id=observation.project_id,
            condition=observation.condition,
            subject_type=observation.subject_type,
            subject_key=observation.subject_key,
            status__in=UNRESOLVED_FINDING_STATUSES,
        )
        return existing, False
    event_append(
        type=EventType.FINDING_OPENED,
        severity=Severity.WARN,
        actor=SYSTEM,
        at=now,
        project=finding.project,
        task=finding.task,
        attempt_id=finding.attempt_id,
        payload={
            "finding": finding.pk,
            "condition": finding.condition,
            "subject_type": finding.subject_type,
            "subject": finding.subject_key[:200],
        },
    )
    return finding, True


@write_transaction
def _finish(
    run: ReconciliationRun,
    *,
    status: str,
    errors: list[dict[str, Any]],
    pruned: list[str],
    finished_at: datetime,
) -> None:
    if status == RunStatus.SUCCEEDED and errors:
        status = RunStatus.PARTIAL
    ReconciliationRun.objects.filter(pk=run.pk).update(
        status=status, errors=errors, pruned=pruned, finished_at=finished_at
    )
    if status == RunStatus.FAILED:
        logger.error("reconciliation run %s failed: %s", run.pk, errors)
