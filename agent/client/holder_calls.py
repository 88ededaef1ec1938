"""The holder calls of a lease keeper (SPEC §13): what the work writes with the lease while it runs.

The keeper's `note`/`checkpoint`/`set_git`/`renew`/`finish`/`release` are the
holder calls to use while it runs: they raise `LeaseLost` once the lease is
lost or the attempt ended, without a request. `finish` and `release` stop the
renewals first, so no renewal races the end of the attempt.

`finish`, `release` and `set_git` outlast a dropped connection or a restarting
server: a try that got no answer (CONNECTION_FAILED, or a retryable refusal
such as a 502/503) is sent again under the same Idempotency-Key, with a
backoff (agent.client.retries), for as long as the lease holds on
this machine's clock and at most five minutes. A finish the
server did but could not answer is answered from its idempotency record, so
a server restart shorter than the lease costs no finished work. A finish that
is refused gives its usage back to the tally, for the next finish.

Riding out partitions (SPEC §23.4, `agent.client.partition`), `finish` is
not given up when the lease runs out on this machine's clock while the server
cannot be reached: it is sent on, late, under the same key until the server
answers, and it decides (a `release` then would change nothing: it stops). `late_report` is the finish of
a lease lost to a partition: the one write such a keeper still makes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agent.client.api import LeaseholdClient
from agent.client.errors import LEASE_LOSS_CODES, LeaseholdError, LeaseLost
from agent.client.models import Finished, Lease, NoteKind, NoteWritten, Outcome, Renewed, is_past
from agent.client.partition import LeaseClock
from agent.client.retries import BUDGET_CODE, LATE_REPORT_WINDOW_SECONDS, answered
from agent.client.usage import Usage, UsageTally, usage_body

T = TypeVar("T")

CANCELLED = "cancelled"
# Answers that mean this attempt is not ours to hold any more.
ENDING_CODES = LEASE_LOSS_CODES | {"NOT_FOUND", "LEASE_LOST"}


class HolderCalls:
    """The holder calls of `agent.client.keeper.LeaseKeeper`, which holds the state and the renewal loop."""

    client: LeaseholdClient
    lease: Lease
    lost: threading.Event
    lost_reason: str | None
    ended: bool
    budget_exhausted: bool
    partitioned: bool
    ride_out_partitions: bool
    clock: LeaseClock
    lease_expires_at: str | None
    usage: UsageTally
    _usage_in_flight: tuple[str, dict[str, Any]] | None
    _lock: threading.RLock

    # The renewal loop's (LeaseKeeper's) own.
    def stop(self) -> None:
        raise NotImplementedError

    def _lose(self, reason: str, error: LeaseholdError | None, *, partition: bool = False) -> None:
        raise NotImplementedError

    def _exhaust(self, error: LeaseholdError) -> None:
        raise NotImplementedError

    def _notify(self) -> None:
        raise NotImplementedError

    def _release_cancelled(self) -> None:
        raise NotImplementedError

    def ensure_held(self, *, ending: bool = False) -> None:
        """LeaseLost unless this keeper may still make a holder call (`ending`: finish or release)."""
        if self.lost.is_set() and not (ending and self.budget_exhausted and not self.ended):
            raise LeaseLost(
                f"The lease on {self.lease.task} is lost ({self.lost_reason}); stop working on it.",
                details={"attempt": self.lease.attempt_id, "task": self.lease.task},
            )
        if self.ended:
            raise LeaseLost(
                f"Attempt {self.lease.attempt_id} on {self.lease.task} has ended; its token is not used again.",
                details={"attempt": self.lease.attempt_id, "task": self.lease.task},
            )

    def _holder_call(self, call: Callable[[], T], *, ends: bool = False) -> T:
        try:
            with self._lock:
                self.ensure_held(ending=ends)
                try:
                    result = call()
                except LeaseholdError as error:
                    if error.code in ENDING_CODES:
                        self._lose(f"{error.code} on a holder call: {error.message}", error)
                    elif error.code == BUDGET_CODE:
                        self._exhaust(error)
                    raise
                if ends:
                    self.ended = True
                return result
        finally:
            self._notify()

    def renew(self, *, lease_seconds: int | None = None, usage: Usage | None = None) -> Renewed:
        renewed = self._holder_call(lambda: self.client.renew(self.lease, lease_seconds=lease_seconds, usage=usage))
        self.lease_expires_at = renewed.get("lease_expires_at", self.lease_expires_at)
        if renewed.get("task_status") == CANCELLED:
            self.stop()
            self._release_cancelled()
            self._notify()
        return renewed

    def note(
        self,
        content: str,
        *,
        kind: NoteKind = "progress",
        next_steps: list[str] | None = None,
        important: bool = False,
        usage: Usage | None = None,
    ) -> NoteWritten:
        written = self._holder_call(
            lambda: self.client.note(
                self.lease, content, kind=kind, next_steps=next_steps, important=important, usage=usage
            )
        )
        self.lease_expires_at = written.get("lease_expires_at", self.lease_expires_at)
        return written

    def checkpoint(self, content: str, *, next_steps: list[str] | None = None) -> NoteWritten:
        return self.note(content, kind="checkpoint", next_steps=next_steps)

    def _answered(self, send: Callable[[str], T], *, ends: bool = False, late: bool = False) -> T:
        """`send(idempotency_key)` as a holder call, sent again under the same key while it gets no answer.

        Riding out partitions, a `late` call (the finish) is sent on, late, after the lease ran out here.
        """
        return answered(
            lambda key: self._holder_call(lambda: send(key), ends=ends),
            lease_ended=self._ran_out,
            task=self.lease.task,
            late_window=LATE_REPORT_WINDOW_SECONDS if late and self.ride_out_partitions else 0.0,
            on_unanswered=self._note_unanswered,
        )

    def _ran_out(self) -> bool:
        if not self.ride_out_partitions:
            return is_past(self.lease_expires_at)
        holds = self.clock.holds_for(self.lease_expires_at)
        return holds is not None and holds <= 0

    def _note_unanswered(self, error: LeaseholdError) -> None:
        if self.ride_out_partitions:
            self.clock.unreachable(self.lease_expires_at, str(error))

    def set_git(self, **facts: Any) -> dict[str, Any]:
        """Record git facts (`LeaseholdClient.set_git`'s keywords); retried while unanswered (`_answered`)."""
        return self._answered(lambda key: self.client.set_git(self.lease, idempotency_key=key, **facts))

    def finish(self, outcome: Outcome, **fields: Any) -> Finished:
        """End the attempt (done, review, failed, handoff); renewals stop first. Carries all unreported usage.

        Retried while unanswered (`_answered`); refused, its usage goes back to the tally.
        """
        self.ensure_held(ending=True)
        self.stop()
        given = fields.pop("usage", None)
        if given:
            self.usage.add(given)
        fields["usage"] = self._unreported_usage()
        try:
            return self._answered(
                lambda key: self.client.finish(self.lease, outcome, idempotency_key=key, **fields), ends=True, late=True
            )
        except LeaseholdError:
            if fields["usage"]:
                self.usage.add(fields["usage"])
            raise

    def _unreported_usage(self) -> dict[str, Any] | None:
        """The tally, plus a renewal's usage that never got an answer (it may, rarely, have been counted)."""
        in_flight, self._usage_in_flight = self._usage_in_flight, None
        if in_flight is not None:
            self.usage.add(in_flight[1])
        return usage_body(self.usage.take())

    def late_report(self, outcome: Outcome, **fields: Any) -> Finished:
        """After a partition loss: the finish (git facts, outcome), sent once the server answers, under one key.

        The one write a lease lost without the server's word still makes (SPEC §23.4): the server takes it
        when the lease was still held and refuses it (LEASE_EXPIRED, STALE_EPOCH) otherwise. Either way the
        token is not used again.
        """
        with self._lock:
            if not self.partitioned or self.ended:
                self.ensure_held(ending=True)  # raises LeaseLost: nothing late to report
            self.stop()
            fields["usage"] = self._unreported_usage()
        try:
            finished = answered(
                lambda key: self.client.finish(self.lease, outcome, idempotency_key=key, **fields),
                lease_ended=self._ran_out,
                task=self.lease.task,
                late_window=LATE_REPORT_WINDOW_SECONDS,
            )
        except LeaseholdError as error:
            if error.code == "ACKNOWLEDGEMENT_REQUIRED":
                raise  # answered without ending anything: the caller re-reads the task and reports again
            self.ended = True
            self.client.forget_lease(self.lease)
            raise
        self.ended = True
        return finished

    def release(self, *, reason: str = "") -> Finished:
        """Give the task back untouched; renewals stop first."""
        self.ensure_held(ending=True)
        self.stop()
        return self._answered(
            lambda key: self.client.release(self.lease, reason=reason, idempotency_key=key), ends=True
        )
