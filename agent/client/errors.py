"""The client's exceptions: one class per error code of the API's envelope (SPEC §8).

The server answers every error as `{"error": {"code", "message", "retryable",
"details"}}`. `error_from_envelope` turns that into the subclass registered for
the code (an unknown code still becomes a `LeaseholdError` carrying it), so
callers switch on the type or on `.code`, never on the message.

Three codes exist only on this side of the wire: `CONNECTION_FAILED` (no answer
at all), `LEASE_LOST` (the toolkit refuses to write with a lease it knows is
gone, without asking the server) and `CALL_ABANDONED` (the caller cut its own
call short, `agent.client.wire.Abandon`: whether the server did the work is
not known).
"""

from __future__ import annotations

from typing import Any, ClassVar


class LeaseholdError(Exception):
    """An error answered by the server (or, for the client-side codes, by the toolkit)."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
        http_status: int = 0,
    ) -> None:
        if code is not None:
            # An unknown code keeps its own name on a plain LeaseholdError.
            self.code = code  # type: ignore[misc]
        self.message = message or self.code
        self.retryable = self.default_retryable if retryable is None else retryable
        self.details: dict[str, Any] = details or {}
        self.http_status = http_status
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable, "details": self.details}


class ValidationFailed(LeaseholdError):
    code = "VALIDATION_ERROR"


class InvalidBranchName(LeaseholdError):
    code = "INVALID_BRANCH_NAME"


class InvalidStatusTransition(LeaseholdError):
    code = "INVALID_STATUS_TRANSITION"


class AuthenticationFailed(LeaseholdError):
    code = "AUTHENTICATION_FAILED"


class PermissionDenied(LeaseholdError):
    code = "PERMISSION_DENIED"


class NotFound(LeaseholdError):
    code = "NOT_FOUND"


class MethodNotAllowed(LeaseholdError):
    code = "METHOD_NOT_ALLOWED"


class NotAcceptable(LeaseholdError):
    code = "NOT_ACCEPTABLE"


class TaskTaken(LeaseholdError):
    code = "TASK_TAKEN"


class TaskNotClaimable(LeaseholdError):
    code = "TASK_NOT_CLAIMABLE"


class VersionConflict(LeaseholdError):
    code = "VERSION_CONFLICT"


class AcknowledgementRequired(LeaseholdError):
    code = "ACKNOWLEDGEMENT_REQUIRED"


class IdempotencyConflict(LeaseholdError):
    code = "IDEMPOTENCY_CONFLICT"


class EnvironmentUnavailable(LeaseholdError):
    code = "ENVIRONMENT_UNAVAILABLE"
    default_retryable = True


class DependencyCycle(LeaseholdError):
    code = "DEPENDENCY_CYCLE"


class StaleReviewTarget(LeaseholdError):
    code = "STALE_REVIEW_TARGET"


class BudgetExhausted(LeaseholdError):
    """The budget is spent: the lease is over for this work; finish (or release) the attempt."""

    code = "BUDGET_EXHAUSTED"


class AgentPaused(LeaseholdError):
    """An operator paused (drained) this agent: no new claims; the leases it holds run on."""

    code = "AGENT_PAUSED"


class PathsReserved(LeaseholdError):
    code = "PATHS_RESERVED"


class LeaseExpired(LeaseholdError):
    code = "LEASE_EXPIRED"


class LeaseNotHeld(LeaseholdError):
    code = "LEASE_NOT_HELD"


class StaleEpoch(LeaseholdError):
    code = "STALE_EPOCH"


class InvalidLeaseToken(LeaseholdError):
    code = "INVALID_LEASE_TOKEN"


class PayloadTooLarge(LeaseholdError):
    code = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(LeaseholdError):
    code = "UNSUPPORTED_MEDIA_TYPE"


class RateLimited(LeaseholdError):
    code = "RATE_LIMITED"
    default_retryable = True


class SearchTooBroad(LeaseholdError):
    code = "SEARCH_TOO_BROAD"


class StorageBusy(LeaseholdError):
    code = "STORAGE_BUSY"
    default_retryable = True


class InternalError(LeaseholdError):
    code = "INTERNAL_ERROR"


class ConnectionFailed(LeaseholdError):
    """No HTTP answer: refused, reset, timed out. Retried only for calls that are safe to repeat."""

    code = "CONNECTION_FAILED"
    default_retryable = True


class CallAbandoned(LeaseholdError):
    """Raised by the toolkit itself: the call was abandoned (`Abandon.abandon`) before its answer came.

    The request may have been done on the server all the same: resend it with the same Idempotency-Key
    to learn its answer (`agent.runner.slots` does, on a drain)."""

    code = "CALL_ABANDONED"


class LeaseLost(LeaseholdError):
    """Raised by the toolkit itself: this lease is gone, and nothing more is sent with its token."""

    code = "LEASE_LOST"


def _registry() -> dict[str, type[LeaseholdError]]:
    """Every subclass by its code, read from the hierarchy itself (a new subclass registers by existing).

    `LeaseholdError` itself is left out: it is what an unknown code becomes,
    while INTERNAL_ERROR has its own class.
    """
    found: dict[str, type[LeaseholdError]] = {}
    pending: list[type[LeaseholdError]] = list(LeaseholdError.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.code in found and found[cls.code] is not cls:
            raise RuntimeError(f"two error classes share the code {cls.code}")
        found[cls.code] = cls
        pending.extend(cls.__subclasses__())
    return found


ERRORS_BY_CODE: dict[str, type[LeaseholdError]] = _registry()

# Answers that end a lease for good: the holder must stop and never write with that token again.
LEASE_LOSS_CODES = frozenset({"LEASE_EXPIRED", "LEASE_NOT_HELD", "STALE_EPOCH", "INVALID_LEASE_TOKEN"})
# Refusals after which the attempt is over on the server (a stale review's attempt is released by its refusal):
# the toolkit forgets the attempt's state rather than keep a file that says it is held.
ATTEMPT_ENDED_CODES = LEASE_LOSS_CODES | {"STALE_REVIEW_TARGET"}


def error_from_envelope(body: Any, *, http_status: int) -> LeaseholdError:
    """The exception for an error response; a body that is not the envelope is judged by its status."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = error["code"]
        cls = ERRORS_BY_CODE.get(code, LeaseholdError)
        retryable = error.get("retryable")
        details = error.get("details")
        return cls(
            str(error.get("message") or code),
            code=None if cls is not LeaseholdError else code,
            retryable=retryable if isinstance(retryable, bool) else None,
            details=details if isinstance(details, dict) else {},
            http_status=http_status,
        )
    # Not our server's envelope (a proxy, a crash page): gateway trouble is worth a retry.
    return LeaseholdError(
        f"HTTP {http_status} without an error envelope.",
        code=f"HTTP_{http_status}",
        retryable=http_status in (502, 503, 504),
        http_status=http_status,
    )
