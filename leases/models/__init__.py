"""Who holds what: attempts (leased executions of a task), their notes, idempotency records.

The database holds the lease invariants (SPEC §2): one active attempt per
task (partial unique index), the "exactly when" rules of the outcome fields
(CHECK constraints), and the expiry of active leases for the sweep on a
narrow table kept by triggers (`LeaseClock`).
"""

from __future__ import annotations

from leases.models.allocations import Allocation, AllocationStatus
from leases.models.attempts import (
    HOST_MAX_CHARS,
    TERMINAL_STATUSES,
    WORKTREE_PATH_MAX_CHARS,
    Attempt,
    AttemptKind,
    AttemptStatus,
    FailureReason,
    InterruptionReason,
)
from leases.models.checks import (
    CHECK_NAME_PATTERN,
    CHECK_SUMMARY_MAX_CHARS,
    CHECK_URL_MAX_CHARS,
    COMMIT_PATTERN,
    CheckResult,
    CheckState,
)
from leases.models.idempotency import IdempotencyRecord
from leases.models.lease_clock import LeaseClock
from leases.models.lease_samples import LeaseSample
from leases.models.notes import (
    AGENT_NOTE_KINDS,
    NEXT_STEP_MAX_CHARS,
    NEXT_STEPS_MAX_ITEMS,
    NOTE_MAX_CHARS,
    Note,
    NoteKind,
)
from leases.models.path_reservations import PathReservation, ReservationLock
from leases.models.reviews import (
    DECIDED_REVIEW_STATUSES,
    PENDING_REVIEW_STATUSES,
    REVIEW_FINDING_MAX_CHARS,
    REVIEW_FINDINGS_MAX_ITEMS,
    REVIEW_SUMMARY_MAX_CHARS,
    ReviewRequest,
    ReviewStatus,
)
from leases.models.tallies import ClaimRefusalTally
from leases.models.usage import AgentDailyUsage, AttemptUsage, BudgetFlags, ProjectDailyUsage, TaskUsage, UsageCounts

__all__ = [
    "AGENT_NOTE_KINDS",
    "CHECK_NAME_PATTERN",
    "CHECK_SUMMARY_MAX_CHARS",
    "CHECK_URL_MAX_CHARS",
    "COMMIT_PATTERN",
    "DECIDED_REVIEW_STATUSES",
    "HOST_MAX_CHARS",
    "NEXT_STEPS_MAX_ITEMS",
    "NEXT_STEP_MAX_CHARS",
    "NOTE_MAX_CHARS",
    "PENDING_REVIEW_STATUSES",
    "REVIEW_FINDINGS_MAX_ITEMS",
    "REVIEW_FINDING_MAX_CHARS",
    "REVIEW_SUMMARY_MAX_CHARS",
    "TERMINAL_STATUSES",
    "WORKTREE_PATH_MAX_CHARS",
    "AgentDailyUsage",
    "Allocation",
    "AllocationStatus",
    "Attempt",
    "AttemptKind",
    "AttemptStatus",
    "AttemptUsage",
    "BudgetFlags",
    "CheckResult",
    "CheckState",
    "ClaimRefusalTally",
    "FailureReason",
    "IdempotencyRecord",
    "InterruptionReason",
    "LeaseClock",
    "LeaseSample",
    "Note",
    "NoteKind",
    "PathReservation",
    "ProjectDailyUsage",
    "ReservationLock",
    "ReviewRequest",
    "ReviewStatus",
    "TaskUsage",
    "UsageCounts",
]
