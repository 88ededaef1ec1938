"""Reconciliation runs (SPEC §7, §25); the admin's triage services live in `triage` and are re-exported here.

A run reads the clock once, then: records itself (a short write), reads the
live side of the ledger (active attempts, held allocations: bounded by live
work), reads git per project with no transaction open, and writes its
findings in short transactions of at most `WRITE_CHUNK` each
(`reconciliation.recording`). Ended attempts are history: each project's are
read in chunks, only those that changed since its last run
(`reconciliation.incremental`; `full=True` re-reads the lookback window).
Only then — if asked — it prunes removable worktrees. Slow git never holds a
lock a claim could need.

A repository that cannot be read is an error on the run, and the git
conditions of that project are neither opened nor resolved by that run: a
failed read proves nothing. Everything else still reconciles.

Safe to run twice at once: findings are upserted under the partial unique
index and resolved by compare-and-set, so each gets one `finding.opened` and
one `finding.resolved`; a run that sees a newer run under way stops writing
(it is `superseded`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from core.db import write_transaction
from ledger import clock
from reconciliation import conditions, git_conditions
from reconciliation.conditions import Observation
from reconciliation.git import GitError
from reconciliation.git_conditions import RepositoryView, is_landed_and_removable
from reconciliation.incremental import reconcile_ended
from reconciliation.landed import LandedOutside, landed_outside, landing_projects, save_target_cursors
from reconciliation.models import (
    ENDED_ATTEMPT_CONDITIONS,
    GIT_CONDITIONS,
    GIT_INFORMED_CONDITIONS,
    Condition,
    ReconciliationRun,
    RunStatus,
)
from reconciliation.pruning import prune_worktrees as prune_removable_worktrees
from reconciliation.recording import Superseded, Tally, resolve_unobserved, write_observations
from reconciliation.snapshot import LedgerSnapshot, branch_deliveries, branch_histories, read_ledger
from reconciliation.triage import attempt_discard, finding_acknowledge, finding_resolve

__all__ = ["attempt_discard", "finding_acknowledge", "finding_resolve", "reconcile"]

logger = logging.getLogger(__name__)

LEDGER_CONDITIONS: frozenset[str] = frozenset(Condition.values) - GIT_CONDITIONS - GIT_INFORMED_CONDITIONS
# Git conditions judged whole at every run: they read the repository's branches and worktrees, not history.
BRANCH_CONDITIONS: frozenset[str] = GIT_CONDITIONS - ENDED_ATTEMPT_CONDITIONS

# What the doors pass to land delivered tasks found in their target (`landing.services.tasks_landed_outside`).
LandOutside = Callable[[LandedOutside], object]


def reconcile(
    *, prune_worktrees: bool = False, land_outside: LandOutside | None = None, full: bool = False
) -> ReconciliationRun:
    """Run every condition over every project once; return the finished run.

    With `land_outside` (the doors pass `landing.services.tasks_landed_outside`, a room this one may
    not import), delivered tasks whose head git finds in their target are handed to it first, so
    this run already sees them landed (SPEC §21.2). With `full`, every project's ended attempts of
    the lookback window and every delivered task are read again, not only those that changed since its last run.
    """
    now = clock.now()
    started = time.monotonic()
    run = ReconciliationRun.objects.create(started_at=now, prune_worktrees=prune_worktrees, full=full)
    tally = Tally()
    errors: list[dict[str, Any]] = []
    try:
        landing_errors: list[dict[str, Any]] = []
        if land_outside is not None:
            check = landed_outside(landing_projects(), full=full)
            if check.landed:
                land_outside(check.landed)
            save_target_cursors(check, now=now)
            landing_errors = check.errors
        snapshot = read_ledger(now=now)
        seen = _observe(snapshot, run_id=run.pk, now=now, full=full, tally=tally)
        errors = [*seen.errors, *_new_errors(landing_errors, seen.errors)]
        landed_worktrees = [o for o in seen.observations if is_landed_and_removable(o)]
        observations = [o for o in seen.observations if not is_landed_and_removable(o)]
        write_observations(run_id=run.pk, observations=observations, tally=tally, now=now)
        resolve_unobserved(run_id=run.pk, scope=seen.scope, tally=tally, now=now)
        pruned: list[str] = []
        if prune_worktrees:
            pruned, prune_errors = prune_removable_worktrees(
                snapshot=snapshot, observations=[*observations, *landed_worktrees], now=now
            )
            errors = [*errors, *prune_errors]
        status = RunStatus.PARTIAL if errors else RunStatus.SUCCEEDED
        _finish(run, status=status, errors=errors, pruned=pruned, finished_at=_finished_at(now, started), tally=tally)
    except Superseded:
        _finish(
            run,
            status=RunStatus.SUPERSEDED,
            errors=errors,
            pruned=[],
            finished_at=_finished_at(now, started),
            tally=tally,
        )
    except Exception as exc:
        failure = [{"project": None, "message": f"{type(exc).__name__}: {exc}"[:500]}]
        try:
            _finish(
                run,
                status=RunStatus.FAILED,
                errors=failure,
                pruned=[],
                finished_at=_finished_at(now, started),
                tally=tally,
            )
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


@dataclass
class Seen:
    """What a run observed outside the ended attempts (those are written as they are read), and the
    findings it judged: `scope` selects the unresolved findings to resolve when not observed."""

    observations: list[Observation] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    scope: Q = field(default_factory=Q)


def _observe(snapshot: LedgerSnapshot, *, run_id: int, now: datetime, full: bool, tally: Tally) -> Seen:
    """Evaluate every condition; git is read here, with no transaction open.

    The ended attempts of each readable project are judged here too, a chunk
    at a time, each chunk's findings written as it is judged.
    """
    silence = timedelta(seconds=settings.LEASEHOLD_AGENT_SILENCE_SECONDS)
    stall = timedelta(seconds=settings.LEASEHOLD_STALL_SECONDS)
    attempts, allocations = snapshot.active_attempts, snapshot.allocations
    seen = Seen(
        observations=[
            *conditions.expired_lease_still_active(attempts, now=now),
            *conditions.duplicate_branch_label(attempts, now=now),
            *conditions.leaked_environment(allocations),
            *conditions.environment_collision(allocations),
            *conditions.insufficient_isolation(allocations),
        ]
    )
    activity: dict[tuple[int, str], datetime] = {}
    readable: list[int] = []
    unreadable: set[int] = set()
    for project in snapshot.projects:
        if project.archived or not project.reads_git:
            continue  # an archived project's repository may be long gone; its git findings stay as they are
        try:
            view = RepositoryView(project)
            observed = _observe_git(view, snapshot, now=now)
            reconcile_ended(view, run_id=run_id, now=now, full=full, tally=tally)
        except GitError as exc:
            seen.errors.append({"project": project.slug, "repository": project.repository, "message": str(exc)})
            unreadable.add(project.id)
            continue
        seen.observations.extend(observed)
        activity.update(git_conditions.branch_activity(view))
        readable.append(project.id)
    informed = [attempt for attempt in attempts if attempt.project_id not in unreadable]
    seen.observations.extend(conditions.live_lease_dead_agent(informed, now=now, silence=silence, activity=activity))
    seen.observations.extend(conditions.stalled_attempt(informed, now=now, stall=stall, activity=activity))
    seen.scope = (
        Q(condition__in=LEDGER_CONDITIONS)
        | Q(condition__in=BRANCH_CONDITIONS, project_id__in=readable)
        | (Q(condition__in=GIT_INFORMED_CONDITIONS) & ~Q(project_id__in=unreadable))
    )
    return seen


def _observe_git(view: RepositoryView, snapshot: LedgerSnapshot, *, now: datetime) -> list[Observation]:
    """The git conditions of one project judged whole: its branches and worktrees against the live attempts."""
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
    ]


@write_transaction
def _finish(
    run: ReconciliationRun,
    *,
    status: str,
    errors: list[dict[str, Any]],
    pruned: list[str],
    finished_at: datetime,
    tally: Tally,
) -> None:
    if status == RunStatus.SUCCEEDED and errors:
        status = RunStatus.PARTIAL
    ReconciliationRun.objects.filter(pk=run.pk).update(
        status=status,
        errors=errors,
        pruned=pruned,
        finished_at=finished_at,
        counts=tally.counts(),
        opened=tally.opened,
        resolved=tally.resolved,
    )
    if status == RunStatus.FAILED:
        logger.error("reconciliation run %s failed: %s", run.pk, errors)
