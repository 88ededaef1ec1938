"""Holder calls that outlast a dropped connection or a restarting server (issue 29).

`answered(send, …)` sends `send(idempotency_key)` and, while a try gets no answer (CONNECTION_FAILED, or
a retryable refusal such as a 502/503), sends it again under the same Idempotency-Key: with a backoff
from HOLDER_RETRY_FIRST_DELAY doubling up to HOLDER_RETRY_MAX_DELAY, while the lease holds on this
machine's clock and for at most HOLDER_RETRY_WINDOW_SECONDS. Every other answer ends it at once. A
call the server did but could not answer is answered from its idempotency record, so a server restart
shorter than the lease costs no finished work.
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


def answered(send: Callable[[str], T], *, lease_ended: Callable[[], bool], task: str) -> T:
    key = f"lh-{uuid.uuid4().hex}"
    give_up_at = time.monotonic() + HOLDER_RETRY_WINDOW_SECONDS
    delay = HOLDER_RETRY_FIRST_DELAY
    while True:
        try:
            return send(key)
        except LeaseholdError as error:
            unanswered = error.code == "CONNECTION_FAILED" or (error.retryable and error.code != BUDGET_CODE)
            if not unanswered or lease_ended() or time.monotonic() + delay > give_up_at:
                raise
            print(
                f"leasehold: {error.code} on {task}; trying again in {delay:.1f} s "
                "(same Idempotency-Key, while the lease holds)",
                file=sys.stderr,
            )
        time.sleep(delay)
        delay = min(HOLDER_RETRY_MAX_DELAY, delay * 2)
