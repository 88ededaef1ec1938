"""A work slot's claim with the server-side wait (SPEC §25), which a drain abandons at once.

An idle slot keeps one claim parked on the server for up to `wait_seconds`. On SIGTERM the runner calls
`ParkedClaim.abandon()`: the claim's socket is shut down (`agent.client.wire.Abandon`), so the slot is
free at once instead of when the wait answers, and the server drops the parked request as its client
hangs up (`core.parking`).

A task may have been claimed by that request all the same: the server can hand one over just as the
request is abandoned, and a server that waits in a thread (without the parking worker) notices the
hang-up only when it answers. So the slot makes sure, before it stops, that the abandoned claim holds
nothing (`settle`), by its Idempotency-Key, which is per agent and whatever the path (`leases.idempotency`):

1. It sends `POST /agents/me/heartbeat/` (harmless) under the claim's key. If that is answered, the key is
   the heartbeat's now: every later try of the abandoned claim is refused as IDEMPOTENCY_CONFLICT, so it
   can never claim anything. It took nothing.
2. If that is refused as IDEMPOTENCY_CONFLICT, the claim stored its answer first (a claim that was being
   made commits before the heartbeat's insert goes on): the same claim, resent with the same key and body,
   is that answer replayed at once with its lease token. A task it took is given back (`ClaimAbandoned.claim`;
   the slot releases it with the reason).
3. Any other failure (the server unreachable, the token refused): the slot cannot tell and says so; a task
   it took is handed off when the runner registers again (`runner_restart`), or its lease lapses.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from agent.client.api import LeaseholdClient
from agent.client.errors import CallAbandoned, LeaseholdError
from agent.client.models import Claim
from agent.client.wire import Abandon


class ClaimAbandoned(Exception):
    """The parked claim was abandoned; `claim` is what it took (the slot must give it back), if anything.
    `sure` is False when the server could not tell whether it took anything."""

    def __init__(self, message: str, claim: Claim | None = None, *, sure: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.claim = claim
        self.sure = sure


class ParkedClaim:
    """One slot's parked claims, one at a time; `abandon()` may be called from any thread."""

    def __init__(self, client: LeaseholdClient, stopping: threading.Event) -> None:
        self.client = client
        self.stopping = stopping
        self._lock = threading.Lock()
        self._current: Abandon | None = None

    def abandon(self) -> None:
        """Cut the parked claim short, if one is in flight (called after `stopping` is set)."""
        with self._lock:
            current = self._current
        if current is not None:
            current.abandon()

    def claim(
        self, project: str, *, wait: int, lease_seconds: int | None, environment_kind: str | None = None
    ) -> Claim | None:
        """`claim_next` with `wait`; None when nothing came or the drain began. `ClaimAbandoned` if abandoned."""
        abandon = Abandon()
        options: dict[str, Any] = {
            "wait": wait,
            "lease_seconds": lease_seconds,
            "environment_kind": environment_kind,
            "idempotency_key": f"lh-{uuid.uuid4().hex}",
        }
        with self._lock:
            self._current = abandon
        try:
            # Checked after the hook is in place: a drain that begins from now on finds it and abandons it.
            if self.stopping.is_set():
                return None
            return self.client.claim_next(project, abandon=abandon, **options)
        except CallAbandoned:
            raise self.settle(project, options) from None
        finally:
            with self._lock:
                self._current = None

    def settle(self, project: str, options: dict[str, Any]) -> ClaimAbandoned:
        """What the abandoned claim took, made sure of by its Idempotency-Key (the module docstring)."""
        where = f"the claim wait on {project} was abandoned (drain)"
        try:
            self.client.request("POST", "/agents/me/heartbeat/", idempotency_key=options["idempotency_key"])
        except LeaseholdError as error:
            if error.code != "IDEMPOTENCY_CONFLICT":
                return ClaimAbandoned(
                    f"{where}; cannot tell whether it took a task ({error.code}: {error}): one it took is "
                    "handed off when the runner registers again, or its lease lapses",
                    sure=False,
                )
        else:
            return ClaimAbandoned(f"{where}: it took nothing")
        try:
            claim = self.client.claim_next(project, **options)  # answered first: its answer, replayed
        except LeaseholdError as error:
            return ClaimAbandoned(
                f"{where}: it was answered {error.code} first" + (", nothing taken" if not error.retryable else ""),
                sure=not error.retryable,
            )
        if claim is None:
            return ClaimAbandoned(f"{where}: it was answered first, with nothing to claim")
        return ClaimAbandoned(f"{where} after it took {claim.lease.task} (attempt {claim.lease.attempt_id})", claim)
