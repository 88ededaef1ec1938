"""The shapes the agent API answers with (SPEC §8), as the client returns them.

TypedDicts are the JSON as sent (`total=False` where the server may grow a
field); `Lease` and `Claim` are what the toolkit itself builds from a claim
(frozen records, `agent.client.records`: a CLI call does not import
`dataclasses`).

Unlike the rest of the toolkit, this module's annotations are evaluated when
it is imported (no `from __future__ import annotations`): a TypedDict turns
each field's annotation given as a string into a `ForwardRef` and compiles
it, which cost every CLI call ~5 ms of CPU (issue 34). A forward reference
is quoted here.
"""

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, TypedDict, cast, get_args

from agent.client.records import FrozenRecord

try:
    # The interpreter's own SHA-256: hashlib's OpenSSL library costs a CLI call ~4 ms of CPU to load (issue 34).
    from _sha256 import sha256  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # an interpreter built without it
    from hashlib import sha256

# A review attempt (SPEC §16.1) decides with approved / changes_requested / blocked, or fails / hands off.
Outcome = Literal["done", "review", "failed", "handoff", "approved", "changes_requested", "blocked"]
REVIEW_DECISIONS = ("approved", "changes_requested", "blocked")
NoteKind = Literal["progress", "finding", "warning", "checkpoint"]
# Whose lease a `Lease` is, as the API's path names it.
LeaseHolds = Literal["attempts", "landings"]
TaskTextField = Literal["description", "acceptance_criteria"]
FailureReason = Literal[
    "implementation_error",
    "environment_error",
    "missing_dependency",
    "invalid_requirements",
    "tests_failed",
    "context_lost",
    "timeout",
    "other",
]
InterruptionReason = Literal[
    "handoff", "context_limit", "user_request", "client_shutdown", "environment_change", "other"
]
# The API's choices for finish's reason codes (SPEC §8).
FAILURE_REASONS: tuple[str, ...] = get_args(FailureReason)
INTERRUPTION_REASONS: tuple[str, ...] = get_args(InterruptionReason)
# What `POST /attempts/{id}/git/` (and finish's `git`) record (SPEC §15.4).
GIT_FACTS = (
    "branch",
    "base_commit",
    "head_commit",
    "commits_ahead",
    "dirty",
    "pushed",
    "worktree_path",
    "host",
)


class Project(TypedDict, total=False):
    slug: str
    name: str
    key_prefix: str
    repository: str
    default_branch: str
    default_lease_seconds: int
    queue_wait_max_seconds: int
    required_isolation: str
    archived_at: str | None


class CompactTask(TypedDict, total=False):
    key: str
    title: str
    status: str
    effective_status: str
    priority: int
    task_class: str
    version: int
    epoch: int
    holder: str | None
    lease_expires_at: str | None
    blocked_by: int
    claimable: bool


class AttemptSummary(TypedDict, total=False):
    id: int
    task: str
    epoch: int
    status: str
    lease_expires_at: str
    branch: str | None
    base_commit: str | None
    environment: str | None
    label: str


class TaskText(TypedDict):
    """A range of a task's long text: `text` starts at `offset`; `more` says whether any follows."""

    key: str
    field: str
    offset: int
    length: int
    text: str
    more: bool


class Page(TypedDict):
    results: list[Any]
    next_cursor: str | None


class Renewed(TypedDict, total=False):
    lease_expires_at: str
    renew_count: int
    task_status: str  # the task's stored status; "cancelled" means stop and release
    new_comments: int  # comments on the task since the claim (SPEC §16.2)


class NoteWritten(TypedDict):
    note: dict[str, Any]
    lease_expires_at: str


class Finished(TypedDict):
    attempt: AttemptSummary
    task: CompactTask


class Event(TypedDict, total=False):
    id: int
    type: str
    severity: str
    task: str | None
    attempt: int | None
    actor: str
    payload: dict[str, Any]
    created_at: str


class Changes(TypedDict):
    events: list[Event]
    latest_event_id: int
    has_more: bool


class Lease(FrozenRecord):
    """What a holder needs to act on an attempt. The token is never printed (kept out of `repr`).

    `holds` says whose lease it is: a work attempt's (`attempts`, the default) or a landing's
    (`landings`, SPEC §21, where `attempt_id` is the landing's id); the one `renew` reads it.
    """

    __slots__ = (  # noqa: RUF023 (the fields in order)
        "attempt_id", "token", "epoch", "task", "renew_every_seconds", "renew_attempts", "lease_expires_at", "holds",
    )  # fmt: skip
    REPR_HIDDEN: ClassVar[frozenset[str]] = frozenset({"token"})
    attempt_id: int
    token: str
    epoch: int
    task: str
    renew_every_seconds: int
    renew_attempts: int
    lease_expires_at: str | None
    holds: LeaseHolds

    def __init__(
        self,
        attempt_id: int,
        token: str,
        epoch: int,
        task: str,
        renew_every_seconds: int = 300,
        renew_attempts: int = 3,
        lease_expires_at: str | None = None,
        holds: LeaseHolds = "attempts",
    ) -> None:
        self._set(
            attempt_id=attempt_id,
            token=token,
            epoch=epoch,
            task=task,
            renew_every_seconds=renew_every_seconds,
            renew_attempts=renew_attempts,
            lease_expires_at=lease_expires_at,
            holds=holds,
        )

    @property
    def renew_path(self) -> str:
        return f"/{self.holds}/{self.attempt_id}/renew/"

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "token": self.token,
            "epoch": self.epoch,
            "task": self.task,
            "renew_every_seconds": self.renew_every_seconds,
            "renew_attempts": self.renew_attempts,
            "lease_expires_at": self.lease_expires_at,
            **({"holds": self.holds} if self.holds != "attempts" else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Lease":
        return cls(
            attempt_id=int(data["attempt_id"]),
            token=str(data["token"]),
            epoch=int(data["epoch"]),
            task=str(data["task"]),
            renew_every_seconds=int(data.get("renew_every_seconds") or 300),
            renew_attempts=int(data.get("renew_attempts") or 3),
            lease_expires_at=data.get("lease_expires_at"),
            holds="landings" if data.get("holds") == "landings" else "attempts",
        )


class Claim(FrozenRecord):
    """A successful claim: the lease to hold, the attempt, the compact task and the work context."""

    __slots__ = ("lease", "attempt", "task", "context", "label")  # noqa: RUF023 (the fields in order)
    lease: Lease
    attempt: AttemptSummary
    task: CompactTask
    context: dict[str, Any]
    label: str

    def __init__(
        self, lease: Lease, attempt: AttemptSummary, task: CompactTask, context: dict[str, Any], label: str
    ) -> None:
        self._set(lease=lease, attempt=attempt, task=task, context=context, label=label)

    @classmethod
    def from_response(cls, body: dict[str, Any]) -> "Claim":
        attempt = cast(AttemptSummary, body["attempt"])
        lease = Lease(
            attempt_id=int(attempt["id"]),
            token=str(body["lease_token"]),
            epoch=int(body["epoch"]),
            task=str(attempt["task"]),
            renew_every_seconds=int(body["renew_every_seconds"]),
            renew_attempts=int(body["renew_attempts"]),
            lease_expires_at=body.get("lease_expires_at"),
        )
        return cls(
            lease=lease,
            attempt=attempt,
            task=cast(CompactTask, body.get("task") or {}),
            context=body.get("context") or {},
            label=str(body.get("label") or ""),
        )

    def summary(self) -> dict[str, Any]:
        """The claim without its token: what a human, a script or a model is shown."""
        return {
            "task": self.lease.task,
            "attempt": self.lease.attempt_id,
            "epoch": self.lease.epoch,
            "lease_expires_at": self.lease.lease_expires_at,
            "renew_every_seconds": self.lease.renew_every_seconds,
            "branch": self.attempt.get("branch"),
            "environment": self.attempt.get("environment"),
            "label": self.label,
        }


def lease_fingerprint(token: str) -> str:
    """A short, one-way name for a lease token (for traces and the lost-lease registry)."""
    return sha256_hex(token)[:16]


def sha256_hex(text: str) -> str:
    """SHA-256 of `text` (UTF-8), in hex."""
    return str(sha256(text.encode()).hexdigest())


def is_past(moment_text: str | None) -> bool:
    """Whether an ISO 8601 time from the server is already past on this machine's clock (False if unknown)."""
    if not moment_text:
        return False
    try:
        moment = datetime.fromisoformat(moment_text)
    except ValueError:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment <= datetime.now(UTC)
