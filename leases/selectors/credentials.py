"""Which attempt a command credential is for (SPEC §23.2): read on every request that presents one."""

from __future__ import annotations

import hmac
from datetime import datetime

from core.prepared import SAMPLE_INT, Prepared
from leases.models import Attempt, AttemptStatus
from leases.tokens import attempt_id_of_token
from ledger.tokens import hash_token

# Every request with an attempt token runs it: one primary-key lookup, compiled once (`core.prepared`).
_LIVE_ATTEMPT_WITH_AGENT: Prepared[Attempt] = Prepared(
    lambda attempt_id: (
        Attempt.objects.select_related("agent", "task")
        .filter(pk=attempt_id, status=AttemptStatus.ACTIVE, agent__is_active=True)
        .order_by("pk")[:1]
    ),
    samples=({"attempt_id": SAMPLE_INT[0]}, {"attempt_id": SAMPLE_INT[1]}),
)


def attempt_for_token(token: str, *, now: datetime) -> Attempt | None:
    """The live attempt whose command credential `token` is, with its agent and task; else None.

    None as well when the attempt has ended in any way (finished, released,
    revoked, expired — swept or merely past its lease), when its agent is
    deactivated, or when a newer credential replaced this one: a dead
    credential is refused on the very next request, as an agent's token is.
    """
    attempt_id = attempt_id_of_token(token)
    if attempt_id is None:
        return None
    attempt = _LIVE_ATTEMPT_WITH_AGENT.first(attempt_id=attempt_id)
    if attempt is None or not attempt.command_token_hash:
        return None
    if not hmac.compare_digest(attempt.command_token_hash, hash_token(token)):
        return None
    if attempt.lease_expires_at <= now:
        return None
    return attempt
