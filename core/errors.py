"""One error hierarchy with stable codes (SPEC §8).

Services raise `LedgerError` subclasses; the API's exception handler turns
each into the envelope `{"error": {"code", "message", "retryable",
"details"}}` with the HTTP status fixed per code here, in one place.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerError(Exception):
    code: ClassVar[str] = "INTERNAL_ERROR"
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False
    default_message: ClassVar[str] = "Internal error."

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None) -> None:
        self.message = message or self.default_message
        self.details: dict[str, Any] = details or {}
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }


class ValidationFailed(LedgerError):
    code = "VALIDATION_ERROR"
    http_status = 400
    default_message = "The request is not valid."


class InvalidBranchName(LedgerError):
    code = "INVALID_BRANCH_NAME"
    http_status = 400
    default_message = "The branch name does not follow Conventional Branch 1.1.0."


class InvalidStatusTransition(LedgerError):
    code = "INVALID_STATUS_TRANSITION"
    http_status = 400
    default_message = "That status change is not allowed."


class AuthenticationFailed(LedgerError):
    code = "AUTHENTICATION_FAILED"
    http_status = 401
    default_message = "Authentication failed."


class PermissionDenied(LedgerError):
    code = "PERMISSION_DENIED"
    http_status = 403
    default_message = "You may not do that."


class NotFound(LedgerError):
    code = "NOT_FOUND"
    http_status = 404
    default_message = "Not found."


class MethodNotAllowed(LedgerError):
    """HTTP's own refusal, in the envelope; not in the SPEC table."""

    code = "METHOD_NOT_ALLOWED"
    http_status = 405
    default_message = "This method is not allowed here."


class NotAcceptable(LedgerError):
    code = "NOT_ACCEPTABLE"
    http_status = 406
    default_message = "The API answers application/json only."


class UnsupportedMediaType(LedgerError):
    code = "UNSUPPORTED_MEDIA_TYPE"
    http_status = 415
    default_message = "Send the request body as application/json."


class TaskTaken(LedgerError):
    code = "TASK_TAKEN"
    http_status = 409
    default_message = "Another agent holds a live lease on this task."


class TaskNotClaimable(LedgerError):
    code = "TASK_NOT_CLAIMABLE"
    http_status = 409
    default_message = "The task cannot be claimed."


class VersionConflict(LedgerError):
    code = "VERSION_CONFLICT"
    http_status = 409
    default_message = "The task changed since you read it."


class AcknowledgementRequired(LedgerError):
    code = "ACKNOWLEDGEMENT_REQUIRED"
    http_status = 409
    default_message = "The task changed since the claim; acknowledge its current version to finish."


class IdempotencyConflict(LedgerError):
    code = "IDEMPOTENCY_CONFLICT"
    http_status = 409
    default_message = "This Idempotency-Key was used with a different request."


class EnvironmentUnavailable(LedgerError):
    code = "ENVIRONMENT_UNAVAILABLE"
    http_status = 409
    retryable = True
    default_message = "No environment is free."


class DependencyCycle(LedgerError):
    code = "DEPENDENCY_CYCLE"
    http_status = 409
    default_message = "That dependency would create a cycle."


class StaleReviewTarget(LedgerError):
    code = "STALE_REVIEW_TARGET"
    http_status = 409
    default_message = "The task or its branch changed since the review was requested; the request is superseded."


class BudgetExhausted(LedgerError):
    """SPEC §19: a task's budget, or an agent's or project's budget for the day, is spent."""

    code = "BUDGET_EXHAUSTED"
    http_status = 409
    default_message = "The budget is spent; finish or release the attempt."


class AgentPaused(LedgerError):
    """An operator paused (drained) the agent: it claims nothing new; its live leases run on."""

    code = "AGENT_PAUSED"
    http_status = 409
    default_message = "This agent is paused: it claims no new work; finish or release what it holds."


class PathsReserved(LedgerError):
    """SPEC §19: the claim's paths overlap another live attempt's reservation."""

    code = "PATHS_RESERVED"
    http_status = 409
    default_message = "Another live attempt reserved some of these paths."


class LeaseExpired(LedgerError):
    code = "LEASE_EXPIRED"
    http_status = 409
    default_message = "The lease has expired; the attempt is over."


class LeaseNotHeld(LedgerError):
    code = "LEASE_NOT_HELD"
    http_status = 409
    default_message = "This attempt no longer holds the lease."


class StaleEpoch(LedgerError):
    code = "STALE_EPOCH"
    http_status = 409
    default_message = "The task was claimed again since this attempt began."


class InvalidLeaseToken(LedgerError):
    code = "INVALID_LEASE_TOKEN"
    http_status = 409
    default_message = "The lease token does not match this attempt."


class PayloadTooLarge(LedgerError):
    code = "PAYLOAD_TOO_LARGE"
    http_status = 413
    default_message = "The request body is too large."


class RateLimited(LedgerError):
    code = "RATE_LIMITED"
    http_status = 429
    retryable = True
    default_message = "Too many requests."


class SearchTooBroad(LedgerError):
    """A search that matched too much to rank within its time bound (SPEC §25); narrowing it helps, retrying not."""

    code = "SEARCH_TOO_BROAD"
    http_status = 400
    default_message = "The search matched too much to answer in time; add words or a project."


class StorageBusy(LedgerError):
    code = "STORAGE_BUSY"
    http_status = 503
    retryable = True
    default_message = "The database is busy; retry shortly."


def _registry() -> dict[str, type[LedgerError]]:
    """Every error class by its code, read from the hierarchy itself (a new subclass registers by existing)."""
    found: dict[str, type[LedgerError]] = {}
    pending: list[type[LedgerError]] = [LedgerError]
    while pending:
        cls = pending.pop()
        if cls.code in found and found[cls.code] is not cls:
            raise RuntimeError(f"two error classes share the code {cls.code}")
        found[cls.code] = cls
        pending.extend(cls.__subclasses__())
    return found


ERRORS_BY_CODE: dict[str, type[LedgerError]] = _registry()
