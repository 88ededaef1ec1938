"""A run's findings, written in short transactions (SPEC §25).

A first run that finds thousands of mismatches once opened them one at a
time inside one transaction and held back the changes feed for every reader
for minutes. Now every write is a chunk of at most `WRITE_CHUNK`
observations (or stale findings) in a transaction of its own, so what is
written becomes visible, and readers move on, chunk by chunk.

Opening stays an upsert under the partial unique index (one unresolved
finding per condition and subject) and resolving a compare-and-set, so a
chunk written twice — a retry, an interrupted run resumed, two runs at once
— opens nothing twice. A run that sees a newer run under way stops writing
(`Superseded`): two runs never flap a finding open and resolved.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q

from core.db import write_transaction
from leases.models import Attempt
from ledger.actors import SYSTEM
from ledger.models import EventType, Severity
from ledger.services import event_append
from reconciliation.conditions import Observation
from reconciliation.models import (
    UNRESOLVED_FINDING_STATUSES,
    Condition,
    Finding,
    ReconciliationRun,
    RunStatus,
)
from reconciliation.snapshot import chunks
from reconciliation.triage import RECONCILIATION_ACTOR, finding_payload, resolve_finding_locked

# Observations (or stale findings) per write transaction.
WRITE_CHUNK = 200

Key = tuple[int, str, str, str]  # (project id, condition, subject type, subject key)


class Superseded(Exception):
    """A newer run is under way: this one writes nothing more."""


@dataclass
class Tally:
    """What a run has written so far; `observed` holds the key of every finding holding at this run."""

    observed: set[Key] = field(default_factory=set)
    opened: int = 0
    resolved: int = 0

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(Condition.values, 0)
        for _, condition, _, _ in self.observed:
            counts[condition] += 1
        return counts


def finding_key(finding: Finding) -> Key:
    return (finding.project_id, finding.condition, finding.subject_type, finding.subject_key)


def _refuse_if_superseded(run_id: int) -> None:
    newer = ReconciliationRun.objects.filter(pk__gt=run_id).exclude(status__in=(RunStatus.FAILED, RunStatus.SUPERSEDED))
    if newer.exists():
        raise Superseded


def _unresolved_for(observations: Sequence[Observation]) -> dict[Key, Finding]:
    """The unresolved findings of these observations' subjects, by key (served by the partial unique index)."""
    by_project: dict[int, set[str]] = defaultdict(set)
    for observation in observations:
        by_project[observation.project_id].add(observation.subject_key)
    query = Q()
    for project_id, subjects in by_project.items():
        query |= Q(project_id=project_id, subject_key__in=sorted(subjects))
    wanted = {observation.key for observation in observations}
    found = Finding.objects.filter(query, status__in=UNRESOLVED_FINDING_STATUSES).select_related("project", "task")
    return {finding_key(f): f for f in found if finding_key(f) in wanted}


@dataclass(frozen=True)
class Written:
    opened: int
    resolved: int


@write_transaction
def write_chunk(
    *,
    run_id: int,
    observations: Sequence[Observation],
    now: datetime,
    settles: Q | None = None,
    work_seen: dict[int, int] | None = None,
    also: Callable[[], None] | None = None,
) -> Written:
    """One short transaction: open or refresh `observations`; resolve the unresolved findings `settles`
    selects that none of them is; record `work_seen`; then `also` (a cursor moving with the chunk)."""
    _refuse_if_superseded(run_id)
    unresolved = _unresolved_for(observations) if observations else {}
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
    if refreshed:
        Finding.objects.filter(pk__in=refreshed).update(last_seen_at=now)
    resolved = 0
    if settles is not None:
        stale = Finding.objects.filter(settles, status__in=UNRESOLVED_FINDING_STATUSES).exclude(pk__in=refreshed)
        for finding in stale.select_related("project", "task").order_by("id"):
            resolved += resolve_finding_locked(finding, actor=SYSTEM, by=RECONCILIATION_ACTOR, now=now)
    if work_seen:
        _record_work_seen(work_seen, now=now)
    if also is not None:
        also()
    return Written(opened=opened, resolved=resolved)


def write_observations(*, run_id: int, observations: Iterable[Observation], tally: Tally, now: datetime) -> None:
    """Open or refresh every observation, `WRITE_CHUNK` per transaction."""
    for chunk in chunks(list(observations), WRITE_CHUNK):
        written = write_chunk(run_id=run_id, observations=chunk, now=now)
        tally.opened += written.opened
        tally.observed.update(observation.key for observation in chunk)


@write_transaction
def _resolve(*, run_id: int, findings: Sequence[Finding], now: datetime) -> int:
    _refuse_if_superseded(run_id)
    return sum(resolve_finding_locked(f, actor=SYSTEM, by=RECONCILIATION_ACTOR, now=now) for f in findings)


def resolve_unobserved(*, run_id: int, scope: Q, tally: Tally, now: datetime) -> None:
    """Resolve the unresolved findings in `scope` this run did not observe: read by key, `WRITE_CHUNK` at a
    time, each chunk's resolutions in a transaction of its own."""
    last = 0
    while True:
        batch = list(
            Finding.objects.filter(scope, status__in=UNRESOLVED_FINDING_STATUSES, pk__gt=last)
            .select_related("project", "task")
            .order_by("pk")[:WRITE_CHUNK]
        )
        if not batch:
            return
        last = batch[-1].pk
        stale = [finding for finding in batch if finding_key(finding) not in tally.observed]
        if stale:
            tally.resolved += _resolve(run_id=run_id, findings=stale, now=now)


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
        payload=finding_payload(finding),
    )
    return finding, True


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
