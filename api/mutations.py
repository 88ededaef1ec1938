"""Idempotent writes (SPEC §8): every mutating view runs its work through `run_mutation`.

Without an `Idempotency-Key` the work just runs. With one, the agent's key,
the request's fingerprint and the stored outcome are kept by
`leases.idempotency`: the same key with the same request replays the stored
status and body, with another request it is IDEMPOTENCY_CONFLICT.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from api.auth import caller_of
from api.errors import envelope
from core.errors import ValidationFailed
from leases.idempotency import NOT_LOOKED_UP, StoredResult, idempotent_call

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,128}$")
FINGERPRINTED_HEADERS = ("HTTP_IF_MATCH", "HTTP_X_ATTEMPT_ID", "HTTP_X_LEASE_EPOCH", "HTTP_X_LEASE_TOKEN")


@dataclass(frozen=True)
class MutationResult:
    """What a mutating view's work produced: the HTTP status, body and headers to answer.
    `attempt_id` names the attempt whose lease token the body carries under `lease_token` (claims)."""

    status: int
    data: Any = None
    attempt_id: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


def to_native(data: Any) -> Any:
    """The data exactly as the renderer will see it, so a replay renders the same bytes."""
    if data is None:
        return None
    return json.loads(json.dumps(data, cls=JSONEncoder, ensure_ascii=True))


def request_fingerprint(request: Request) -> str:
    """SHA-256 of what makes two requests "the same": method, path, body, lease and version headers."""
    digest = hashlib.sha256()
    digest.update(f"{request.method}\n{request.get_full_path()}\n".encode())
    data = request.data
    body = data.dict() if hasattr(data, "dict") else data
    digest.update(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())
    for name in FINGERPRINTED_HEADERS:
        digest.update(f"\n{name}={request.META.get(name, '')}".encode("utf-8", errors="surrogateescape"))
    return digest.hexdigest()


def _response(result: MutationResult, *, replayed: bool) -> Response:
    response = Response(result.data, status=result.status, headers=result.headers)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def run_mutation(request: Request, work: Callable[[], MutationResult]) -> Response:
    """Run a mutating operation, under the caller's `Idempotency-Key` when one is sent.

    Same key, same request → the stored status and body, without doing the
    work again; same key, another request → IDEMPOTENCY_CONFLICT. See
    `leases.idempotency` for how duplicates racing each other do the work once.
    """
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        # Nothing is stored, so nothing has to be made native first: the renderer's encoder is the
        # one `to_native` uses and gives the same bytes (two JSON passes fewer; issue 20).
        return _response(work(), replayed=False)
    if not IDEMPOTENCY_KEY.match(key):
        raise ValidationFailed(
            "Idempotency-Key must be 1 to 128 visible ASCII characters.",
            details={"fields": {"Idempotency-Key": ["1-128 visible ASCII characters"]}},
        )
    agent = caller_of(request).agent
    if agent is None:
        raise ValidationFailed("Idempotency-Key is kept per agent; staff users cannot send one.")

    def native_work() -> StoredResult:
        produced = work()
        return StoredResult(status=produced.status, data=to_native(produced.data), attempt_id=produced.attempt_id)

    # The stored answer, when authentication read it with the agent (`api.auth`): once, since a waiting
    # claim-next runs its work again, and a duplicate may have committed an answer meanwhile.
    known = getattr(request.user, "known_records", None) or {}
    result = idempotent_call(
        agent=agent,
        key=key,
        fingerprint=request_fingerprint(request),
        work=native_work,
        refusal_body=envelope,
        stored=known.pop(key) if key in known else NOT_LOOKED_UP,
    )
    return _response(MutationResult(status=result.status, data=result.data), replayed=result.replayed)
