"""The lease keeper: holds an attempt's lease while the work runs (SPEC §3, §13).

A background thread renews the lease every `renew_every_seconds` (from the
claim) and tells `on_renewed(lease_expires_at)` after each success. The
lease is *lost* — renewing stops, `lost` is set, `on_lost` is called, and the
token is never sent again (by this keeper or by its client) —

- at once, when the server answers a renewal or any holder call with
  LEASE_EXPIRED, LEASE_NOT_HELD, STALE_EPOCH, INVALID_LEASE_TOKEN or
  NOT_FOUND: the attempt is over, someone else may hold the task;
- after `renew_attempts` consecutive failed renewals (no answer, a busy
  server, anything else). After a failure the keeper tries again after half
  an interval rather than a whole one, so with the server's one-third-of-the-
  lease interval the work learns of the loss at about two thirds of the lease,
  before the server could hand the task to anyone else;
- when a renewal fails and the last known `lease_expires_at` is already past
  on this machine's clock;
- with `ride_out_partitions=True` (`leasehold run`, SPEC §23.4), a renewal
  that got *no answer* (`agent.client.retries.unanswered`) does not count
  towards `renew_attempts`: the work goes on while the lease holds by this
  machine's clock, and the lease is lost only `margin` seconds before it would
  run out (`agent.client.partition`); a renewal answered before that simply
  goes on. Such a loss (`partitioned`) had no word from the server, so the
  token is kept for one write, `late_report`; answered refusals still count as
  above, and the losses the server states are as immediate as ever;
- when a renewal answers `task_status: "cancelled"`: an admin cancelled the
  task while this attempt held it. The keeper releases the attempt first
  (reason "the task was cancelled"), so the lease ends at once instead of
  running on for nobody, and `cancelled` is set.

BUDGET_EXHAUSTED (SPEC §19) ends the lease's work the same way — renewals stop,
`lost` is set, `budget_exhausted` says why — except that the token is kept:
the server still takes `finish` and `release`, and the work should end with
one of them. Usage reported with `report_usage` rides on the next renewal
(which it brings forward, at most once per USAGE_REPORT_SECONDS) and on the
finish; a renewal that got no answer is retried with the same usage under
the same Idempotency-Key, so a report is counted once.

With `watch_changes=True` a second thread follows the changes feed
(`LeaseholdClient.iter_changes`, a long-poll) and, the moment an event says
this attempt was revoked or expired (or its task reassigned), renews at once:
the server's refusal ends the lease then, instead of at the next renewal.
An event is only a prompt to ask; the loss is decided by the server's answer,
as always.

The holder calls (`note`, `checkpoint`, `set_git`, `renew`, `finish`,
`late_report`, `release`) are `agent.client.holder_calls.HolderCalls`.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.holder_calls import CANCELLED, ENDING_CODES, HolderCalls
from agent.client.models import Lease, is_past
from agent.client.partition import LeaseClock
from agent.client.retries import BUDGET_CODE, unanswered
from agent.client.usage import Usage, UsageTally

# Usage brings the next renewal forward, but not more often than this.
USAGE_REPORT_SECONDS = 1.0
# Events about an attempt after which its holder should ask the server at once.
ENDING_EVENTS = frozenset({"attempt.revoked", "attempt.expired", "task.reassigned"})


class LeaseKeeper(HolderCalls):
    """Renews one lease in the background and refuses holder calls once it is lost."""

    def __init__(
        self,
        client: LeaseholdClient,
        lease: Lease,
        *,
        on_lost: Callable[[str], None] | None = None,
        on_renewed: Callable[[str], None] | None = None,
        renew_every_seconds: float | None = None,
        failure_retry_seconds: float | None = None,
        request_timeout: float | None = None,
        watch_changes: bool = False,
        ride_out_partitions: bool = False,
        partition_margin_seconds: float | None = None,
    ) -> None:
        self.client = client
        self.watch_changes = watch_changes
        self.lease = lease
        self.on_lost = on_lost
        self.on_renewed = on_renewed
        self.interval = max(0.1, float(renew_every_seconds or lease.renew_every_seconds))
        self.failure_retry_seconds = failure_retry_seconds or max(0.1, self.interval / 2)
        self.request_timeout = request_timeout or min(10.0, max(1.0, self.interval / 2))
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self.lost_error: LeaseholdError | None = None
        self.ended = False
        self.cancelled = False
        self.renewals = 0
        self.failures = 0
        self.lease_expires_at = lease.lease_expires_at
        self.budget_exhausted = False
        self.ride_out_partitions = ride_out_partitions
        self.clock = LeaseClock(lease, margin_seconds=partition_margin_seconds)
        self.partitioned = False  # lost to a partition: no word from the server, one late report to send
        self.usage = UsageTally()
        # A renewal's usage that got no answer: (Idempotency-Key, usage), resent as it was.
        self._usage_in_flight: tuple[str, dict[str, Any]] | None = None
        self._last_usage_report = 0.0
        # Renew now: usage to report, or a change said the attempt may have ended.
        self._wake = threading.Event()
        self._notified = False
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None

    # --- the renewal loop -----------------------------------------------------------

    def start(self) -> LeaseKeeper:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"lease-keeper-{self.lease.attempt_id}", daemon=True)
            self._thread.start()
        if self.watch_changes and self._watcher is None:
            self._watcher = threading.Thread(
                target=self._watch, name=f"lease-watcher-{self.lease.attempt_id}", daemon=True
            )
            self._watcher.start()
        return self

    def stop(self) -> None:
        """Stop renewing (idempotent); waits for a renewal in flight to end."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.request_timeout + 2.0)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def held(self) -> bool:
        return not (self.lost.is_set() or self.ended)

    def wait_lost(self, timeout: float | None = None) -> bool:
        return self.lost.wait(timeout)

    def report_usage(self, usage: Usage) -> None:
        """Add usage to what the next renewal (brought forward) or the finish reports."""
        self.usage.add(usage)
        self._wake.set()

    def _run(self) -> None:
        delay: float | None = self.interval
        while delay is not None:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                break
            # Woken by usage: report it now, unless the last report was a moment ago.
            wait_more = self._last_usage_report + USAGE_REPORT_SECONDS - time.monotonic()
            if wait_more > 0 and self._stop.wait(wait_more):
                break
            renewals = self.renewals
            delay = self._renew_once()
            self._notify()
            if self.renewals != renewals and self.on_renewed is not None:
                try:
                    self.on_renewed(str(self.lease_expires_at))
                except Exception as exc:  # the callback's trouble must not stop the renewals
                    print(f"leasehold: on_renewed callback failed: {exc}", file=sys.stderr)

    def _watch(self) -> None:
        """Follow the feed from now on; an ending event about this attempt (or its task) prompts a renewal."""
        try:
            for event in self.client.iter_changes(wait=25, stop=self._stop):
                about_us = event.get("attempt") == self.lease.attempt_id or (
                    event["type"] == "task.reassigned" and event.get("task") == self.lease.task
                )
                if about_us and event["type"] in ENDING_EVENTS:
                    self._wake.set()
                if self._stop.is_set():
                    return
        except Exception as exc:  # the watcher is an accelerator: without it the renewals still find out
            print(f"leasehold: the lease watcher stopped: {exc}", file=sys.stderr)

    def _renew_once(self) -> float | None:
        """One renewal; the delay before the next one, or None to stop."""
        with self._lock:
            if self._stop.is_set() or not self.held:
                return None
            if self._usage_in_flight is None:
                taken = self.usage.take()
                self._usage_in_flight = (uuid.uuid4().hex, taken) if taken else None
            key, usage = self._usage_in_flight or (None, None)
            if usage is not None:
                self._last_usage_report = time.monotonic()
            timeout = self.request_timeout
            if self.clock.unreachable_since is not None:  # in a partition: no try outlasts the margin
                holds = self.clock.holds_for(self.lease_expires_at)
                if holds is not None:
                    timeout = min(timeout, max(0.5, holds - self.clock.margin))
            sent_at = time.monotonic()
            try:
                renewed = self.client.renew(self.lease, retries=0, timeout=timeout, usage=usage, idempotency_key=key)
            except LeaseholdError as error:
                if error.code in ENDING_CODES or error.code == BUDGET_CODE:
                    self._usage_in_flight = None  # answered: counted (budget) or never to be sent again
                return self._renewal_failed(error, str(error))
            except Exception as error:  # a bug must not silently end the loop: count it as a failure
                return self._renewal_failed(None, f"{error.__class__.__name__}: {error}")
            self._usage_in_flight = None
            self.failures = 0
            self.renewals += 1
            self.clock.renewed(sent_at)
            self.lease_expires_at = renewed.get("lease_expires_at", self.lease_expires_at)
            if renewed.get("task_status") == CANCELLED:
                self._release_cancelled()
                return None
            return self.interval

    def _release_cancelled(self) -> None:
        """The task was cancelled under this lease: give the attempt back, then count the lease as lost."""
        with self._lock:
            self.cancelled = True
            try:
                self.client.release(self.lease, reason="the task was cancelled")
                reason = "the task was cancelled; the attempt was released"
            except LeaseholdError as error:
                reason = f"the task was cancelled; releasing the attempt failed ({error.code})"
            except Exception as error:  # still stop: the task is cancelled whatever the release did
                reason = f"the task was cancelled; releasing the attempt failed ({error.__class__.__name__})"
            self._lose(reason, None)

    def _renewal_failed(self, error: LeaseholdError | None, text: str) -> float | None:
        if error is not None and error.code == BUDGET_CODE:
            self._exhaust(error)
            return None
        if error is not None and error.code in ENDING_CODES:
            self._lose(f"renewal refused: {text}", error)
            return None
        if self.ride_out_partitions and error is not None and unanswered(error):
            return self._unreachable(error, text)
        self.failures += 1
        if self.failures >= self.lease.renew_attempts:
            self._lose(f"{self.failures} renewals failed in a row (last: {text})", error)
            return None
        if is_past(self.lease_expires_at):
            self._lose(f"the lease ran out while renewals failed (last: {text})", error)
            return None
        return self.failure_retry_seconds

    def _unreachable(self, error: LeaseholdError, text: str) -> float | None:
        """A renewal got no answer in a partition: go on while the lease holds here, less the margin."""
        left = self.clock.unreachable(self.lease_expires_at, text)
        if left > 0:
            return min(self.failure_retry_seconds, left)
        gone = self.clock.unreachable_for()
        reason = (
            f"the server could not be reached for {gone:.0f} s and the lease would run out on this machine's "
            f"clock within {self.clock.margin:.0f} s (last: {text})"
        )
        self._lose(reason, error, partition=True)
        return None

    def _lose(self, reason: str, error: LeaseholdError | None, *, partition: bool = False) -> None:
        """Record the loss (under the lock); `_notify` tells `on_lost` once the lock is released.

        A `partition` loss keeps the token for the late report; any other never sends it again.
        """
        with self._lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost_error = error
            self.partitioned = partition
            if not partition:
                self.client.forget_lease(self.lease)
            self._stop.set()
            self.lost.set()

    def _exhaust(self, error: LeaseholdError) -> None:
        """The budget is spent: stop the work (renewals, `lost`), keep the token for finish or release."""
        with self._lock:
            if self.lost.is_set():
                return
            self.budget_exhausted = True
            self.lost_reason = f"budget exhausted: {error.message}"
            self.lost_error = error
            self._stop.set()
            self.lost.set()

    def _notify(self) -> None:
        with self._lock:
            if not self.lost.is_set() or self._notified:
                return
            self._notified = True
            reason = self.lost_reason or "lost"
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception as exc:  # the callback's trouble must not hide the loss
                print(f"leasehold: on_lost callback failed: {exc}", file=sys.stderr)
