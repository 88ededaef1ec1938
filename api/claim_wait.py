"""`"wait": seconds` on the claim-next doors (SPEC §25): park until a task is claimable for this caller.

`wait_for_claim(request, *, project_ids, queue, seconds, try_claim, count_claimable)`
runs a claim-next view's `try_claim` until it answers or `seconds` pass:

- `try_claim(final)` makes one claim attempt and returns the response, or
  None for "nothing for me now" (nothing claimable, or a lost race); with
  `final` (the deadline has passed) it must return a response (the 204).
  Under an `Idempotency-Key` a None must leave nothing stored: raise
  `NotYet` inside the mutation's work and return None for it (the work's
  transaction rolls back before its record is written; see `leases.idempotency`).
- `count_claimable()` says how many tasks anyone could still claim in the
  project, counted up to `counted` (1 by default: a yes or no); asked only
  after a try that answered a wake, to pass the wake on when more are
  claimable than the other woken waiters can take (`push.claim_waiters`).
  When it says none, `finished()` (optional) says whether the project's work
  is finished: the wake then goes on to the waiters that asked `until_empty`
  (this one's flag), and to no one else.
- `looks_claimable()` (optional) is a cheap read: whether anything looks
  claimable for this caller. Every try asks it first and skips the claim (its
  write transaction) when it says no: the first try of a request that will
  park, a woken waiter (each server process wakes one of its own waiters per
  commit, so most wakes in a multi-process server find the task already
  gone) and the last try at the deadline — an idle fleet makes a first and a
  last try once per wait (issue 34). When it says no, a try before the
  deadline parks and the last one answers 204, and nothing is stored under
  the Idempotency-Key (a 204 that claimed nothing has no effect to replay; a
  retry with the key asks afresh, as after the tries before it) — unless the
  key already has a stored answer, which the claim's path replays (or refuses
  as a conflict), or the key is one that path refuses: the first and the last
  try look.

With nothing for it, the request takes a waiter's slot (`admit_waiter`,
RATE_LIMITED past the limits) and parks in the registry of claim waiters,
keyed by (project, queue): under the parking worker it holds no thread
(`core.parking`; its ticket rides along in `CARRY_KEY`), elsewhere it waits
in its thread. Woken, it tries again; at the deadline it tries a last time and
answers 204. A waiter that goes away while it owes a wake an answer passes
the wake on (the slot's release closes its ticket).

For `POST /landings/next/`: the same call with `queue="land"`; `try_claim`
runs the lander's claim (None: nothing to land), `count_claimable` whether a
delivered task is still waiting to land (1 or 0).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from rest_framework.request import Request
from rest_framework.response import Response

from api.auth import caller_of
from api.mutations import IDEMPOTENCY_KEY
from core.parking import CARRY_KEY, DEADLINE_KEY, PARK_KEY
from leases.models import IdempotencyRecord
from ledger.apis.changes import admit_waiter
from push.claim_waiters import Ticket, claim_waiters

MAX_WAIT_SECONDS = 60


class NotYet(Exception):
    """Raised inside a waiting claim's work when it found nothing for this caller: nothing is stored."""


def wait_for_claim(
    request: Request,
    *,
    project_ids: Iterable[int],
    queue: str,
    seconds: int,
    try_claim: Callable[[bool], Response | None],
    count_claimable: Callable[[], int],
    counted: int = 1,
    looks_claimable: Callable[[], bool] | None = None,
    until_empty: bool = False,
    finished: Callable[[], bool] | None = None,
) -> Response:
    """Answer a claim-next request that may wait (see the module docstring)."""
    carried = request.META.get(CARRY_KEY)
    if seconds <= 0 and not isinstance(carried, Ticket):
        answer = try_claim(True)
        assert answer is not None
        return answer
    resumed = DEADLINE_KEY in request.META  # a parked request run again: the worker holds its slot
    deadline: float = request.META.get(DEADLINE_KEY) or time.monotonic() + seconds
    registry = claim_waiters()
    ticket = (
        carried
        if isinstance(carried, Ticket)
        else registry.ticket(projects=project_ids, queue=queue, until_empty=until_empty)
    )
    owned_by_worker = False
    release: Callable[[], None] | None = None
    first = not resumed  # this request's first try (a stored answer under its key is replayed at once)
    # This run's first try: authentication read the key's stored answer just now (a thread that waits
    # reads it again at its deadline, since another request may have answered the key meanwhile).
    just_read = True
    try:
        while True:
            final = time.monotonic() >= deadline
            if looks_claimable is not None and not looks_claimable():
                # Nothing is there for this caller: no claim's write transaction, nothing stored.
                if (first or final) and _answered_under_key(request, just_read=just_read):
                    answer = try_claim(final)
                elif not final:
                    answer = None
                else:
                    answer = Response(status=204)
            else:
                answer = try_claim(final)
            first = just_read = False
            if ticket.chain is not None:  # this try answered a wake: pass it on if someone else could use it
                claimable = count_claimable()
                # Nothing left: a finished project's wake goes on to the waiters that answer it (`until_empty`).
                done = not claimable and finished is not None and finished()
                registry.settle(ticket, claimable=claimable, counted=counted, finished=done)
            if answer is not None:
                return answer
            if release is None and not resumed:
                release = _closing(admit_waiter(request), ticket)
            park = request.META.get(PARK_KEY)
            if park is not None:

                def subscribe(wake: Callable[[], None]) -> Callable[[], None]:
                    return registry.park(ticket, wake)

                park(deadline=deadline, subscribe=subscribe, release=release, carry=ticket)
                owned_by_worker = True  # the slot's release (with the ticket's close) is the worker's now
                return Response(status=204)  # never sent: the worker runs this request again when woken
            woken = threading.Event()
            cancel = registry.park(ticket, woken.set)
            try:
                woken.wait(max(0.0, deadline - time.monotonic()))
            finally:
                cancel()
    finally:
        if not owned_by_worker and not resumed:
            if release is not None:
                release()
            registry.close(ticket)


def _answered_under_key(request: Request, *, just_read: bool) -> bool:
    """Whether the claim's own path must answer the last try: the request's Idempotency-Key has a stored
    answer (replayed, or IDEMPOTENCY_CONFLICT), or is a key that path refuses (`api.mutations.run_mutation`).
    `just_read`: this run's authentication read the stored answer with the agent, and it is still current."""
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        return False
    agent = caller_of(request).agent
    if agent is None or not IDEMPOTENCY_KEY.match(key):
        return True
    # Read with the token's agent in this run's authentication (`api.auth`): no statement of its own. A
    # parked request's last try is the first of its run again (the worker runs the request at its deadline).
    known = getattr(request.user, "known_records", None) or {}
    if just_read and key in known:
        return known[key] is not None
    return IdempotencyRecord.objects.filter(agent=agent, key=key).exists()


def _closing(release: Callable[[], None], ticket: Ticket) -> Callable[[], None]:
    """The waiter's slot release that also closes its ticket: however the parked request ends."""

    def release_and_close() -> None:
        release()
        claim_waiters().close(ticket)

    return release_and_close
