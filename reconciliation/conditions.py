"""Each ledger condition of SPEC §7 and §15.4 as a plain function: what was read in, observations out.

The ledger conditions look at the snapshot; two of them (`live_lease_dead_agent`,
`stalled_attempt`) also at when each branch was last committed to, as the
git conditions (`reconciliation.git_conditions`) read it. None of them
writes: `reconciliation.services` turns observations into findings.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from leases.models import AttemptStatus
from ledger import clock
from ledger.models import Isolation
from reconciliation.models import Condition, SubjectType
from reconciliation.snapshot import ActiveAttempt, EndedAttempt, HeldAllocation

# SPEC §7: a young attempt may not have pushed or created its branch yet.
BRANCH_MISSING_GRACE = timedelta(minutes=10)
# How far ahead of the server's clock a commit time may be and still count.
COMMIT_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class Observation:
    """One condition holding for one subject at this run."""

    condition: str
    project_id: int
    subject_type: str
    subject_key: str
    detail: dict[str, Any] = field(default_factory=dict)
    task_id: int | None = None
    attempt_id: int | None = None
    environment_id: int | None = None

    @property
    def key(self) -> tuple[int, str, str, str]:
        return (self.project_id, self.condition, self.subject_type, self.subject_key)


# (project id, branch) → when the branch's tip was committed.
BranchActivity = Mapping[tuple[int, str], datetime]


def attempt_observation(condition: str, attempt: ActiveAttempt | EndedAttempt, detail: dict[str, Any]) -> Observation:
    return Observation(
        condition=condition,
        project_id=attempt.project_id,
        subject_type=SubjectType.ATTEMPT,
        subject_key=str(attempt.id),
        detail={"task": attempt.task_key, "agent": attempt.agent_handle, **detail},
        task_id=attempt.task_id,
        attempt_id=attempt.id,
    )


# --- ledger conditions ----------------------------------------------------------


def _committed_since_claim(attempt: ActiveAttempt, activity: BranchActivity, *, now: datetime) -> datetime | None:
    """When the attempt's branch was last committed to, if after its claim (an inherited tip is not its work).

    A commit time is the committer's clock: one from the future is not
    believed, or a skewed clock would keep a dead holder alive forever.
    """
    committed = activity.get((attempt.project_id, attempt.branch)) if attempt.branch else None
    if committed is None or committed <= attempt.claimed_at or committed > now + COMMIT_CLOCK_SKEW:
        return None
    return committed


def live_lease_dead_agent(
    attempts: Iterable[ActiveAttempt],
    *,
    now: datetime,
    silence: timedelta,
    activity: BranchActivity | None = None,
) -> Iterator[Observation]:
    """A live lease renewed within its own length, held by an agent whose run heartbeat fell silent.

    A lease keeper may outlive the agent it renews for; this is how that
    shows. An agent that never sent a heartbeat counts as silent only once
    the attempt itself is older than the silence window. A commit on the
    attempt's branch after its claim and newer than the heartbeat is a sign
    of life too.
    """
    for attempt in attempts:
        if not attempt.is_live(now):
            continue
        last_activity = max(attempt.claimed_at, attempt.last_renewed_at or attempt.claimed_at)
        if last_activity < now - timedelta(seconds=attempt.lease_seconds):
            continue
        seen = attempt.agent_last_seen_at
        committed = _committed_since_claim(attempt, activity or {}, now=now)
        alive_at = max(seen, committed) if seen is not None and committed is not None else seen or committed
        silent = attempt.claimed_at < now - silence if alive_at is None else alive_at < now - silence
        if silent:
            yield attempt_observation(
                Condition.LIVE_LEASE_DEAD_AGENT,
                attempt,
                {
                    "agent_last_seen_at": clock.iso(seen),
                    "last_renewed_at": clock.iso(attempt.last_renewed_at),
                    "lease_expires_at": clock.iso(attempt.lease_expires_at),
                    **({"branch_committed_at": clock.iso(committed)} if committed is not None else {}),
                },
            )


def stalled_attempt(
    attempts: Iterable[ActiveAttempt],
    *,
    now: datetime,
    stall: timedelta,
    activity: BranchActivity | None = None,
) -> Iterator[Observation]:
    """A live lease kept alive by renewals for longer than `stall` since its holder last worked: alive, not working.

    Work is a note, git facts or a task write by the holder
    (`last_worked_at`), or a commit on its branch after the claim; the
    claim itself counts as the start. Only renewals since then make it
    stalled: a long lease nobody renews is not.
    """
    for attempt in attempts:
        if not attempt.is_live(now) or attempt.last_renewed_at is None:
            continue
        committed = _committed_since_claim(attempt, activity or {}, now=now)
        last_work = max(attempt.last_work, committed) if committed is not None else attempt.last_work
        if attempt.last_renewed_at <= last_work or last_work >= now - stall:
            continue
        yield attempt_observation(
            Condition.STALLED_ATTEMPT,
            attempt,
            {
                "last_work_at": clock.iso(last_work),
                "last_worked_at": clock.iso(attempt.last_worked_at),
                "last_renewed_at": clock.iso(attempt.last_renewed_at),
                "lease_expires_at": clock.iso(attempt.lease_expires_at),
            },
        )


def expired_lease_still_active(attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """Still `active` past its lease: the sweep has not run since. The sweep is the remedy."""
    for attempt in attempts:
        if not attempt.is_live(now):
            yield attempt_observation(
                Condition.EXPIRED_LEASE_STILL_ACTIVE,
                attempt,
                {
                    "lease_expires_at": clock.iso(attempt.lease_expires_at),
                    "overdue_seconds": int((now - attempt.lease_expires_at).total_seconds()),
                },
            )


def duplicate_branch_label(attempts: Iterable[ActiveAttempt], *, now: datetime) -> Iterator[Observation]:
    """One branch named by two live attempts of a project (necessarily of two different tasks)."""
    by_branch: dict[tuple[int, str], list[ActiveAttempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.is_live(now) and attempt.branch:
            by_branch[(attempt.project_id, attempt.branch)].append(attempt)
    for (project_id, branch), holders in sorted(by_branch.items()):
        if len(holders) > 1:
            yield Observation(
                condition=Condition.DUPLICATE_BRANCH_LABEL,
                project_id=project_id,
                subject_type=SubjectType.BRANCH,
                subject_key=branch,
                detail={
                    "attempts": [
                        {"attempt": a.id, "task": a.task_key, "agent": a.agent_handle}
                        for a in sorted(holders, key=lambda a: a.id)
                    ]
                },
            )


def _environment_observation(condition: str, allocation: HeldAllocation, detail: dict[str, Any]) -> Observation:
    return Observation(
        condition=condition,
        project_id=allocation.project_id,
        subject_type=SubjectType.ENVIRONMENT,
        subject_key=allocation.environment_name,
        detail={
            "allocation": allocation.id,
            "allocation_status": allocation.status,
            "attempt": allocation.attempt_id,
            "task": allocation.task_key,
            **detail,
        },
        task_id=allocation.task_id,
        attempt_id=allocation.attempt_id,
        environment_id=allocation.environment_id,
    )


def leaked_environment(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """An allocation still active or stale whose attempt has ended; an admin must release or quarantine it."""
    for allocation in allocations:
        if allocation.attempt_status != AttemptStatus.ACTIVE:
            yield _environment_observation(
                Condition.LEAKED_ENVIRONMENT, allocation, {"attempt_status": allocation.attempt_status}
            )


def insufficient_isolation(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """A held environment below its project's required isolation (the requirement was raised after the claim)."""
    for allocation in allocations:
        if Isolation.rank(allocation.isolation) < Isolation.rank(allocation.required_isolation):
            yield _environment_observation(
                Condition.INSUFFICIENT_ISOLATION,
                allocation,
                {"isolation": allocation.isolation, "required_isolation": allocation.required_isolation},
            )


def _normalized_database_url(url: str) -> str:
    """Two spellings of one database are one database: case of scheme and host, `postgresql`, trailing `/`."""
    parts = urlsplit(url.strip())
    scheme = {"postgresql": "postgres"}.get(parts.scheme.lower(), parts.scheme.lower())
    try:
        port = str(parts.port or "")
    except ValueError:
        port = ""
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


def declared_resources(resources: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (kind, value) pairs two environments must not share: database, ports, container, host path."""
    declared: list[tuple[str, Any]] = []
    if isinstance(resources.get("database_url"), str) and resources["database_url"].strip():
        declared.append(("database_url", _normalized_database_url(resources["database_url"])))
    ports = resources.get("ports")
    if isinstance(ports, list):
        declared.extend(("port", port) for port in ports if isinstance(port, int))
    if isinstance(resources.get("container_name"), str) and resources["container_name"].strip():
        declared.append(("container_name", resources["container_name"].strip()))
    if isinstance(resources.get("host_path"), str) and resources["host_path"].strip():
        declared.append(("host_path", os.path.normpath(resources["host_path"].strip())))
    return declared


def environment_collision(allocations: Iterable[HeldAllocation]) -> Iterator[Observation]:
    """Environments held at once that declare the same database, port, container or host path.

    Compared across projects (a port is a port); each environment involved
    gets its own finding naming the others, so each resolves on its own.
    """
    held = {allocation.environment_id: allocation for allocation in allocations}
    claimants: dict[tuple[str, Any], set[int]] = defaultdict(set)
    for allocation in held.values():
        for resource in declared_resources(allocation.resources):
            claimants[resource].add(allocation.environment_id)
    clashes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for (kind, value), environment_ids in sorted(claimants.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if len(environment_ids) < 2:
            continue
        for environment_id in sorted(environment_ids):
            others = [held[other] for other in sorted(environment_ids) if other != environment_id]
            clashes[environment_id].append(
                {
                    "resource": kind,
                    "value": value,
                    "with": [{"project": o.project_slug, "environment": o.environment_name} for o in others],
                }
            )
    for environment_id, collisions in sorted(clashes.items()):
        yield _environment_observation(
            Condition.ENVIRONMENT_COLLISION, held[environment_id], {"collisions": collisions}
        )
