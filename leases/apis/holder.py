"""The holder's proof, read from `X-Lease-Token` and `X-Lease-Epoch` (SPEC §3, §8).

Malformed or missing headers are the caller's input error (VALIDATION_ERROR);
whether the proof holds is the services' decision (INVALID_LEASE_TOKEN,
STALE_EPOCH, LEASE_NOT_HELD, LEASE_EXPIRED). A command calling with its
attempt token (SPEC §23.2) needs no headers: the credential is the proof.
"""

from __future__ import annotations

import re

from rest_framework.request import Request

from api.auth import AttemptPrincipal, caller_of
from core.errors import ValidationFailed
from leases.services import HolderProof

TOKEN_MAX_CHARS = 200
EPOCH = re.compile(r"[0-9]{1,10}")
EPOCH_MAX = 2**31 - 1


def lease_headers_present(request: Request) -> bool:
    return "HTTP_X_LEASE_TOKEN" in request.META or "HTTP_X_LEASE_EPOCH" in request.META


def holder_proof_from_headers(request: Request, *, attempt_id: int) -> HolderProof:
    """The proof for a holder call on `attempt_id`; PERMISSION_DENIED for a staff user."""
    agent = caller_of(request).require_agent()
    principal = request.user
    if isinstance(principal, AttemptPrincipal):
        # `IsAgentOrStaff` let it through for its own attempt only; the services fence it like a lease token.
        return HolderProof(attempt_id=attempt_id, token=principal.token, epoch=principal.epoch, agent=agent)
    token = request.META.get("HTTP_X_LEASE_TOKEN")
    epoch_text = request.META.get("HTTP_X_LEASE_EPOCH")
    problems: dict[str, list[str]] = {}
    if not token:
        problems["X-Lease-Token"] = ["required"]
    elif len(token) > TOKEN_MAX_CHARS:
        problems["X-Lease-Token"] = [f"at most {TOKEN_MAX_CHARS} characters"]
    if epoch_text is None:
        problems["X-Lease-Epoch"] = ["required"]
    elif not EPOCH.fullmatch(epoch_text.strip()) or int(epoch_text) > EPOCH_MAX:
        problems["X-Lease-Epoch"] = ["a non-negative integer"]
    if problems:
        raise ValidationFailed(
            "Holder calls send the lease token and epoch from the claim: "
            + "; ".join(f"{name}: {messages[0]}" for name, messages in problems.items()),
            details={"fields": problems},
        )
    assert token is not None
    assert epoch_text is not None
    return HolderProof(attempt_id=attempt_id, token=token, epoch=int(epoch_text), agent=agent)
