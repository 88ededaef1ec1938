"""Idempotency keys: a retried mutation is answered, not redone (SPEC §2, §8).

A record is unique per (agent, key) and holds the request's fingerprint, the
status and the body of the first answer — never a lease token: a replayed
claim re-derives its token from the attempt (`leases.tokens`).

How a key is taken, on both databases:

1. Look the key up (with the token's agent, in authentication's statement,
   for an agent token: `api.principal_row`); a stored answer is replayed (or refused with
   IDEMPOTENCY_CONFLICT when the fingerprint differs) without a write lock.
2. Otherwise, in one transaction: the work and the record, committed
   together or not at all, so there is no state where the work happened and
   the answer was lost, and no record is ever seen without its answer.
   - On PostgreSQL the record goes in first, as *pending*, then the work
     runs and the record is filled in (two statements). Transactions run
     side by side there, and the record first is what makes a racing
     duplicate wait (step 3) before it does any work: a duplicate
     claim-next working beside the first would find the first's task
     locked, pass over it, and could commit "nothing claimable" as the
     key's answer before the first commits its claim (the claim then rolls
     back on the duplicate key: issue 34 tried the work first there, and
     `tests/api/test_idempotency.py`'s eight racing duplicates caught it).
   - On SQLite write transactions run one at a time (IMMEDIATE), so a
     duplicate's work can only start after the first has committed: the
     work runs first and the record goes in once, with its answer (one
     statement; issue 34).
   A pending record is never visible to another transaction: it is filled
   in before its transaction commits, or rolls back with it.
3. A concurrent duplicate's insert collides on the unique (agent, key)
   index: on PostgreSQL it waits for the first transaction and then fails,
   on SQLite the IMMEDIATE write transaction waited for the first writer
   already. The duplicate's transaction then rolls back with anything it
   did, and it reads the committed record and replays it: the work takes
   effect once.
4. A non-retryable refusal (TASK_TAKEN, VERSION_CONFLICT, LEASE_EXPIRED, …)
   is the answer too: it is stored in the same transaction and replayed.
   The work stays all-or-nothing because every service runs in its own
   savepoint inside our transaction (`core.db.write_transaction`): a
   service that raises leaves nothing behind, and what a service commits
   *before* refusing stays committed, as it would without a key — the
   expiry a late renewal discovers (`refusals_after_commit`), the tally of
   a claim refused as taken. A view's work therefore makes at most one
   service call that writes, then only reads. Retryable errors
   (STORAGE_BUSY, ENVIRONMENT_UNAVAILABLE) roll everything back and are not
   stored, and neither is input the API refuses before the work starts:
   retrying with the same key is how a client recovers from those.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import IntegrityError, connection

from core.db import write_transaction
from core.errors import IdempotencyConflict, LeaseNotHeld, LedgerError, StorageBusy
from core.prepared import insert, update_row
from leases.models import Attempt, IdempotencyRecord
from leases.tokens import rederive_lease_token
from ledger import clock
from ledger.models import Agent

RETENTION = timedelta(hours=24)
TOKEN_FIELD = "lease_token"  # noqa: S105 - a field name, not a secret
PENDING_STATUS = 0  # a record inserted before its work, on PostgreSQL; filled in before it commits
# A record whose agent lost access to a project since: never replayed (it may
# carry that project's tasks), refused with IDEMPOTENCY_CONFLICT until purged.
VOIDED_STATUS = 1  # not an HTTP status; the column is positive
PURGE_BATCH_SIZE = 5000

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class StoredResult:
    """A status and a JSON-native body; `attempt_id` names the attempt whose token the body carries."""

    status: int
    data: Any = None
    attempt_id: int | None = None
    replayed: bool = False


class _KeyInUse(Exception):
    """Another transaction committed (or is committing) a record for this key."""


def _stored_text(data: Any) -> str | None:
    """The body as stored: JSON text (keeps key order on PostgreSQL's jsonb), token blanked."""
    if data is None:
        return None
    if isinstance(data, dict) and TOKEN_FIELD in data:
        data = {**data, TOKEN_FIELD: None}
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"))


def _insert(*, agent: Agent, key: str, fingerprint: str, outcome: StoredResult | None) -> IdempotencyRecord:
    """Insert the key's record: with its answer, or pending (`outcome` None) to be filled in by `_fill`."""
    record = IdempotencyRecord(
        agent=agent,
        key=key,
        fingerprint=fingerprint,
        status_code=PENDING_STATUS if outcome is None else outcome.status,
        response=None if outcome is None else _stored_text(outcome.data),
        attempt_id=None if outcome is None else outcome.attempt_id,
        created_at=clock.now(),
    )
    try:
        return insert(record)  # compiled once (`core.prepared`)
    except IntegrityError:
        raise _KeyInUse from None


def _fill(record: IdempotencyRecord, outcome: StoredResult) -> None:
    record.status_code = outcome.status
    record.response = _stored_text(outcome.data)
    record.attempt_id = outcome.attempt_id
    update_row(record, ["status_code", "response", "attempt_id"])


@write_transaction
def _run_once(
    *,
    agent: Agent,
    key: str,
    fingerprint: str,
    work: Callable[[], StoredResult],
    refusal_body: Callable[[LedgerError], Any],
) -> StoredResult:
    # The record first where transactions run side by side (step 2 of the module's docstring).
    pending = _insert(agent=agent, key=key, fingerprint=fingerprint, outcome=None) if _record_first() else None
    try:
        outcome = work()
    except LedgerError as refusal:
        if refusal.retryable:
            raise
        outcome = StoredResult(status=refusal.http_status, data=refusal_body(refusal))
    if pending is None:
        _insert(agent=agent, key=key, fingerprint=fingerprint, outcome=outcome)
    else:
        _fill(pending, outcome)
    return outcome


def _record_first() -> bool:
    """Whether the record goes in before the work: wherever write transactions run side by side."""
    return connection.vendor != "sqlite"


def _replay(record: IdempotencyRecord, *, fingerprint: str) -> StoredResult:
    if record.status_code == VOIDED_STATUS:
        raise IdempotencyConflict(
            "This Idempotency-Key's answer was voided: your projects changed since it was used. Send a new key.",
            details={"key": record.key, "reason": "access_changed"},
        )
    if record.fingerprint != fingerprint:
        raise IdempotencyConflict(
            "This Idempotency-Key was used with a different request (method, path, body or lease headers).",
            details={"key": record.key},
        )
    data = json.loads(record.response) if isinstance(record.response, str) else record.response
    if record.attempt_id is not None and isinstance(data, dict) and TOKEN_FIELD in data:
        data[TOKEN_FIELD] = _replayed_token(record.attempt_id)
    return StoredResult(status=record.status_code, data=data, attempt_id=record.attempt_id, replayed=True)


def _replayed_token(attempt_id: int) -> str:
    """The claim's lease token, re-derived and checked against its hash; LEASE_NOT_HELD when it cannot be.

    Never a token the server would refuse: after a rotation of the secret key
    without `LEASEHOLD_SECRET_KEY_FALLBACKS` the token is gone for good, and the
    caller must treat the claim as lost (its lease lapses on its own).
    """
    attempt = Attempt.objects.filter(pk=attempt_id).values("task_id", "epoch", "token_salt", "token_hash").get()
    token = rederive_lease_token(
        task_id=attempt["task_id"], epoch=attempt["epoch"], salt=attempt["token_salt"], token_hash=attempt["token_hash"]
    )
    if token is None:
        raise LeaseNotHeld(
            f"The lease token of attempt {attempt_id} cannot be re-derived: the server's secret key changed "
            "since the claim (keep the old one in LEASEHOLD_SECRET_KEY_FALLBACKS). Treat the claim as lost; "
            "its lease lapses on its own.",
            details={"attempt": attempt_id, "reason": "secret_key_rotated"},
        )
    return token


def _stored(agent: Agent, key: str) -> IdempotencyRecord | None:
    return IdempotencyRecord.objects.filter(agent=agent, key=key).first()


class _NotLookedUp:
    pass


# `idempotent_call`'s `stored` when the caller has not read the record: it is read first.
NOT_LOOKED_UP = _NotLookedUp()


def idempotent_call(
    *,
    agent: Agent,
    key: str,
    fingerprint: str,
    work: Callable[[], StoredResult],
    refusal_body: Callable[[LedgerError], Any],
    stored: IdempotencyRecord | _NotLookedUp | None = NOT_LOOKED_UP,
) -> StoredResult:
    """Do `work` once per (agent, key); replay its stored answer to the same request.

    `stored` is the agent's record of `key` (or None) when the caller read it in this request
    already (`api.auth` reads it with the token's agent, in the same statement): step 1 without a
    statement of its own. A record committed after that read is found as in step 3.
    """
    record = _stored(agent, key) if isinstance(stored, _NotLookedUp) else stored
    if record is not None:
        return _replay(record, fingerprint=fingerprint)
    try:
        return _run_once(agent=agent, key=key, fingerprint=fingerprint, work=work, refusal_body=refusal_body)
    except _KeyInUse:
        record = _stored(agent, key)
        if record is None:  # purged in between: the client may simply retry
            raise StorageBusy("The Idempotency-Key is being recycled; retry.") from None
        return _replay(record, fingerprint=fingerprint)


def idempotency_void(agent: Agent) -> int:
    """Void every stored answer of `agent` (its access shrank): none is replayed again. Returns how many.

    Runs inside the caller's transaction (the change of membership), so no
    replay sees the old access and the new one at once.
    """
    return (
        IdempotencyRecord.objects.filter(agent=agent)
        .exclude(status_code=VOIDED_STATUS)
        .update(status_code=VOIDED_STATUS, response=None)
    )


def idempotency_purge(older_than: datetime | None = None) -> int:
    """Delete records created before `older_than` (default: 24 h ago); returns how many.

    The one deletion in Leasehold: these rows are a cache of answers, not
    ledger history. Deletes in batches so the hourly job never holds a long lock.
    """
    cutoff = older_than if older_than is not None else clock.now() - RETENTION
    total = 0
    while True:
        ids = list(
            IdempotencyRecord.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[:PURGE_BATCH_SIZE]
        )
        if not ids:
            return total
        deleted, _ = IdempotencyRecord.objects.filter(pk__in=ids).delete()
        total += deleted
