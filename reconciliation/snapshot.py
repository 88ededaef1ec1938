"""The ledger side of a reconciliation run: a few short reads, outside any transaction.

Rows are copied into plain dataclasses so the slow part of a run (git) holds
no queryset, cursor or transaction open, and the conditions are plain
functions of what was read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Q

from core.errors import ValidationFailed
from leases.labels import NONE_VALUE, parse_label
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus
from ledger.models import Project, Task, TaskStatus
from reconciliation.models import AttemptDiscard

# Bounds the IN lists of branch lookups.
BRANCH_CHUNK = 500


def attempt_branch(branch: str, label: str) -> str | None:
    """The branch an attempt names: its `branch` field, else its label's branch."""
    if branch:
        return branch
    if f";branch={NONE_VALUE};" in label:
        return None  # a label names its branch once (or is refused): none, without parsing the rest
    try:
        return parse_label(label).branch
    except ValidationFailed:
        return None


@dataclass(frozen=True)
class ProjectRow:
    id: int
    slug: str
    repository: str
    default_branch: str
    archived: bool
    remote: str = ""
    # SPEC §21.1: the branch delivered work lands on; empty: landing off.
    target_branch: str = ""

    @property
    def reads_git(self) -> bool:
        return bool(self.repository or self.remote)


@dataclass(frozen=True)
class ActiveAttempt:
    """An attempt whose stored status is `active` (its lease may have lapsed)."""

    id: int
    task_id: int
    task_key: str
    project_id: int
    agent_handle: str
    agent_last_seen_at: datetime | None
    lease_seconds: int
    lease_expires_at: datetime
    claimed_at: datetime
    last_renewed_at: datetime | None
    branch: str | None
    last_worked_at: datetime | None = None

    def is_live(self, now: datetime) -> bool:
        return self.lease_expires_at > now

    @property
    def last_work(self) -> datetime:
        """The holder's last write beyond renewing (or the claim)."""
        return max(self.claimed_at, self.last_worked_at or self.claimed_at)


@dataclass(frozen=True)
class EndedAttempt:
    """An attempt that ended within `ENDED_LOOKBACK`: what its branch should still show."""

    id: int
    task_id: int
    task_key: str
    task_status: str
    project_id: int
    agent_handle: str
    status: str
    branch: str | None
    base_commit: str
    head_commit: str | None
    commits_ahead: int | None
    seen_commits_ahead: int | None
    finished_at: datetime
    # The task landed (SPEC §21.2): done, with a landed commit.
    task_landed: bool = False


@dataclass(frozen=True)
class HeldAllocation:
    """A non-released allocation (active or stale) and what reconciliation needs about it."""

    id: int
    status: str
    environment_id: int
    environment_name: str
    project_id: int
    project_slug: str
    isolation: str
    required_isolation: str
    resources: dict[str, Any]
    attempt_id: int
    attempt_status: str
    task_id: int
    task_key: str


@dataclass(frozen=True)
class LedgerSnapshot:
    projects: list[ProjectRow]
    active_attempts: list[ActiveAttempt]
    allocations: list[HeldAllocation]

    def live_attempts(self, now: datetime) -> list[ActiveAttempt]:
        return [attempt for attempt in self.active_attempts if attempt.is_live(now)]


def read_ledger(*, now: datetime) -> LedgerSnapshot:
    """Read projects, active attempts and held allocations: three short queries, bounded by live work.

    Ended attempts are history: `reconciliation.ended` reads them in chunks, only what changed.
    """
    projects = [
        ProjectRow(
            id=row["id"],
            slug=row["slug"],
            repository=row["repository"].strip(),
            default_branch=row["default_branch"],
            archived=row["archived_at"] is not None,
            remote=row["remote"].strip(),
            target_branch=row["target_branch"],
        )
        for row in Project.objects.order_by("id").values(
            "id", "slug", "repository", "remote", "default_branch", "archived_at", "target_branch"
        )
    ]
    attempts = [
        ActiveAttempt(
            id=row["id"],
            task_id=row["task_id"],
            task_key=row["task__key"],
            project_id=row["task__project_id"],
            agent_handle=row["agent__handle"],
            agent_last_seen_at=row["agent__last_seen_at"],
            lease_seconds=row["lease_seconds"],
            lease_expires_at=row["lease_expires_at"],
            claimed_at=row["claimed_at"],
            last_renewed_at=row["last_renewed_at"],
            branch=attempt_branch(row["branch"], row["label"]),
            last_worked_at=row["last_worked_at"],
        )
        # Unordered, so the planner starts from an index on status (ordered by id, SQLite walks every
        # attempt ever made); sorted below, these are live work.
        for row in Attempt.objects.filter(status=AttemptStatus.ACTIVE)
        .order_by()
        .values(
            "id",
            "task_id",
            "task__key",
            "task__project_id",
            "agent__handle",
            "agent__last_seen_at",
            "lease_seconds",
            "lease_expires_at",
            "claimed_at",
            "last_renewed_at",
            "last_worked_at",
            "branch",
            "label",
        )
    ]
    allocations = [
        HeldAllocation(
            id=row["id"],
            status=row["status"],
            environment_id=row["environment_id"],
            environment_name=row["environment__name"],
            project_id=row["environment__project_id"],
            project_slug=row["environment__project__slug"],
            isolation=row["environment__isolation"],
            required_isolation=row["attempt__task__project__required_isolation"],
            resources=row["environment__resources"] or {},
            attempt_id=row["attempt_id"],
            attempt_status=row["attempt__status"],
            task_id=row["attempt__task_id"],
            task_key=row["attempt__task__key"],
        )
        for row in Allocation.objects.exclude(status=AllocationStatus.RELEASED)
        .order_by("id")
        .values(
            "id",
            "status",
            "environment_id",
            "environment__name",
            "environment__project_id",
            "environment__project__slug",
            "environment__isolation",
            "environment__resources",
            "attempt_id",
            "attempt__status",
            "attempt__task_id",
            "attempt__task__key",
            "attempt__task__project__required_isolation",
        )
    ]
    attempts.sort(key=lambda attempt: attempt.id)
    return LedgerSnapshot(projects=projects, active_attempts=attempts, allocations=allocations)


@dataclass(frozen=True)
class BranchHistory:
    """Every attempt of a project that named one branch, summed up."""

    branch: str
    attempts: int
    active: int
    completed: int
    latest_attempt_id: int
    latest_attempt_discarded: bool

    @property
    def all_terminal_none_completed(self) -> bool:
        return self.attempts > 0 and self.active == 0 and self.completed == 0


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def branch_histories(*, project_id: int, branches: Collection[str]) -> dict[str, BranchHistory]:
    """Attempt counts for the branches git reported, so history is read only for branches that exist.

    Uses the `branch` field, which claims and `attempt_set_git` keep equal to
    the label's branch.
    """
    rows: list[dict[str, Any]] = []
    discarded: set[int] = set()
    for chunk in chunks(sorted(branches), BRANCH_CHUNK):
        chunk_rows = list(
            Attempt.objects.filter(task__project_id=project_id, branch__in=chunk)
            .values("branch")
            .annotate(
                attempts=Count("id"),
                active=Count("id", filter=Q(status=AttemptStatus.ACTIVE)),
                completed=Count("id", filter=Q(status=AttemptStatus.COMPLETED)),
                latest_attempt_id=Max("id"),
            )
            .order_by()
        )
        discarded.update(
            AttemptDiscard.objects.filter(attempt_id__in=[row["latest_attempt_id"] for row in chunk_rows]).values_list(
                "attempt_id", flat=True
            )
        )
        rows.extend(chunk_rows)
    return {
        row["branch"]: BranchHistory(
            branch=row["branch"],
            attempts=row["attempts"],
            active=row["active"],
            completed=row["completed"],
            latest_attempt_id=row["latest_attempt_id"],
            latest_attempt_discarded=row["latest_attempt_id"] in discarded,
        )
        for row in rows
    }


@dataclass(frozen=True)
class BranchDelivery:
    """What the landing queue says of one branch (SPEC §21): a task delivered on it waits for a lander,
    and the heads of the tasks that landed from it are in their target."""

    branch: str
    delivered: bool
    landed_heads: frozenset[str]


def branch_deliveries(*, project_id: int, branches: Collection[str]) -> dict[str, BranchDelivery]:
    """The delivered and landed tasks of the branches git reported (`delivered_branch`), chunked like
    `branch_histories`; a landed task is `done` with a `landed_commit`."""
    delivered: set[str] = set()
    landed: dict[str, set[str]] = {}
    for chunk in chunks(sorted(branches), BRANCH_CHUNK):
        rows = (
            Task.objects.filter(
                Q(status=TaskStatus.DELIVERED) | (Q(status=TaskStatus.DONE) & ~Q(landed_commit="")),
                project_id=project_id,
                delivered_branch__in=chunk,
            )
            .order_by()
            .values_list("delivered_branch", "status", "delivered_commit")
        )
        for branch, status, head in rows:
            if status == TaskStatus.DELIVERED:
                delivered.add(branch)
            elif head:
                landed.setdefault(branch, set()).add(head)
    return {
        branch: BranchDelivery(
            branch=branch, delivered=branch in delivered, landed_heads=frozenset(landed.get(branch, ()))
        )
        for branch in delivered | set(landed)
    }
