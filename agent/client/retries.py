"""Holder calls that outlast a dropped connection or a restarting server (issue 29), or a partition (SPEC §23.4).

`answered(send, …)` sends `send(idempotency_key)` and, while a try gets no answer (CONNECTION_FAILED, or
a retryable refusal such as a 502/503: `unanswered`), sends it again under the same Idempotency-Key:
with a backoff from HOLDER_RETRY_FIRST_DELAY doubling up to HOLDER_RETRY_MAX_DELAY, while the lease
holds on this machine's clock and for at most HOLDER_RETRY_WINDOW_SECONDS. Every other answer ends it
at once. A call the server did but could not answer is answered from its idempotency record, so a server
restart shorter than the lease costs no finished work.

With `late_window` (a keeper that rides out partitions: its finish and its late report), a call still
unanswered when that ends is not given up: it is sent again, late, for `late_window` seconds more, and
the server decides — it takes the report if the lease was still held, and refuses it (LEASE_EXPIRED,
STALE_EPOCH) otherwise, which the caller shows.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from agent.client.errors import LeaseholdError

T = TypeVar("T")

# The work is over, the attempt is not: finish and release still go through (SPEC §19).
BUDGET_CODE = "BUDGET_EXHAUSTED"
HOLDER_RETRY_WINDOW_SECONDS = 300.0
HOLDER_RETRY_FIRST_DELAY = 0.5
HOLDER_RETRY_MAX_DELAY = 5.0
# How long a report the server could not take is sent again, late, once the lease has run out here.
LATE_REPORT_WINDOW_SECONDS = 600.0


def unanswered(error: LeaseholdError) -> bool:
    """The server could not be reached, or did not get to answer: nothing was decided."""
    return error.code == "CONNECTION_FAILED" or (error.retryable and error.code != BUDGET_CODE)


def answered(
    send: Callable[[str], T],
    *,
    lease_ended: Callable[[], bool],
    task: str,
    late_window: float = 0.0,
    on_unanswered: Callable[[LeaseholdError], None] | None = None,
) -> T:
    key = f"lh-{uuid.uuid4().hex}"
    give_up_at = time.monotonic() + HOLDER_RETRY_WINDOW_SECONDS
    late_until: float | None = None
    delay = HOLDER_RETRY_FIRST_DELAY
    while True:
        try:
            return send(key)
        except LeaseholdError as error:
            if not unanswered(error):
                raise
            if on_unanswered is not None:
                on_unanswered(error)
            now = time.monotonic()
            if late_until is None and (lease_ended() or now + delay > give_up_at):
                if late_window <= 0:
                    raise
                late_until = now + late_window
                print(
                    f"leasehold: {error.code} on {task}, and the lease has run out on this machine's clock: "
                    f"the report is sent again, late, until the server answers (for up to {late_window:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            elif late_until is None:
                print(
                    f"leasehold: {error.code} on {task}; trying again in {delay:.1f} s "
                    "(same Idempotency-Key, while the lease holds)",
                    file=sys.stderr,
                    flush=True,
                )
            if late_until is not None and now + delay > late_until:
                raise
        time.sleep(delay)
        delay = min(HOLDER_RETRY_MAX_DELAY, delay * 2)
