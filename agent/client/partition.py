"""Riding out a network partition (SPEC §23.4): how long a lease holds by this machine's clock.

A keeper made with `ride_out_partitions=True` (what `leasehold run` uses, so
every runner slot) does not count a renewal that got no answer at all — the
server could not be reached (CONNECTION_FAILED), or something between said it
is unavailable (a retryable refusal: 502, 503, 504, STORAGE_BUSY) — towards
`renew_attempts`. It keeps the work going while the lease would still hold,
and declares the lease lost only `margin` seconds before it would run out:

- *when the lease runs out* is the earlier of two readings of this machine's
  clocks: the monotonic time at which the last answered renewal was *sent*,
  plus the lease's length (three renew intervals: the server renews every
  third of the lease, rounded down, so this never overshoots a lease of 3 s or
  more), which no wall-clock skew can move; and the server's last
  `lease_expires_at` on this machine's wall clock;
- the *margin* is `max(5 s, 10 % of the lease)` (`partition_margin`): it
  leaves time for the command to stop (SIGTERM, then the run's grace, then
  SIGKILL) and for clock drift, so the command is normally gone before the
  server could hand the task to anybody else. `leasehold run` widens it to the
  grace plus one second when the grace is longer.

A renewal answered after a partition simply goes on: a partition shorter than
the lease less the margin costs no work and no attempt. An answer that names
the loss (LEASE_EXPIRED, STALE_EPOCH, LEASE_NOT_HELD, …) is as immediate as
ever, and an answered refusal of another kind still counts towards
`renew_attempts`.

A lease lost this way was lost *without the server's word*: the keeper keeps
the token for one more write, the late report (`LeaseKeeper.late_report`, a
finish carrying the git facts and outcome), which is sent once the server
answers, under one Idempotency-Key, for up to `agent.client.retries.LATE_REPORT_WINDOW_SECONDS`. The
server fences it as any holder write: it lands when the lease was still held,
and is refused (LEASE_EXPIRED, or STALE_EPOCH once another attempt claimed the
task) otherwise.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

from agent.client.models import Lease

PARTITION_MARGIN_MIN_SECONDS = 5.0
PARTITION_MARGIN_SHARE = 0.1


def partition_margin(lease_seconds: float) -> float:
    """How long before the lease would run out (by this machine's clock) the work is stopped in a partition."""
    return max(PARTITION_MARGIN_MIN_SECONDS, PARTITION_MARGIN_SHARE * lease_seconds)


def seconds_until(moment_text: str | None) -> float | None:
    """Seconds from now (this machine's wall clock) to an ISO 8601 time from the server; None if unknown."""
    if not moment_text:
        return None
    try:
        moment = datetime.fromisoformat(moment_text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - datetime.now(UTC)).total_seconds()


class LeaseClock:
    """When a lease runs out by this machine's clock, and how long the server has been out of reach."""

    def __init__(self, lease: Lease, *, margin_seconds: float | None = None) -> None:
        self.task = lease.task
        self.lease_seconds = float(3 * lease.renew_every_seconds)
        self.margin = margin_seconds if margin_seconds is not None else partition_margin(self.lease_seconds)
        # The monotonic time the last answered renewal was sent: the server extended the lease after it.
        self._renewed_sent_at: float | None = None
        # The first unanswered call of the current streak (monotonic), None while the server answers.
        self.unreachable_since: float | None = None
        self.streaks = 0  # how many times the server went out of reach during this attempt

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` (monotonic) was answered: the lease holds `lease_seconds` from then."""
        self._renewed_sent_at = sent_at
        if self.unreachable_since is not None:
            gone = time.monotonic() - self.unreachable_since
            print(
                f"leasehold: the server answers again after {gone:.1f} s; the lease on {self.task} was renewed "
                "and the work goes on",
                file=sys.stderr,
                flush=True,
            )
            self.unreachable_since = None

    def holds_for(self, lease_expires_at: str | None) -> float | None:
        """Seconds the lease still holds on this machine's clock (the earlier reading); None if nothing is known."""
        readings = []
        if self._renewed_sent_at is not None:
            readings.append(self._renewed_sent_at + self.lease_seconds - time.monotonic())
        by_wall_clock = seconds_until(lease_expires_at)
        if by_wall_clock is not None:
            readings.append(by_wall_clock)
        return min(readings) if readings else None

    def unreachable(self, lease_expires_at: str | None, last: str) -> float:
        """Count an unanswered call; the seconds left before the work must stop (≤ 0: now)."""
        now = time.monotonic()
        holds = self.holds_for(lease_expires_at)
        left = (holds if holds is not None else 0.0) - self.margin
        if self.unreachable_since is None:
            self.unreachable_since = now
            self.streaks += 1
            print(
                f"leasehold: the server cannot be reached ({last}); the work on {self.task} goes on while the "
                f"lease holds by this machine's clock, for {max(left, 0.0):.1f} s more "
                f"(stopped {self.margin:.0f} s before it would run out)",
                file=sys.stderr,
                flush=True,
            )
        return left

    def unreachable_for(self) -> float:
        return 0.0 if self.unreachable_since is None else time.monotonic() - self.unreachable_since
