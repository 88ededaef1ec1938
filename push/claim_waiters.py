"""Waiting for work, targeted (SPEC §25): one committed event that can make work claimable wakes ONE waiter.

The process's one `ClaimWaiters` (`claim_waiters()`) keeps the requests that
wait on `POST /claims/next/`, `/reviews/next/` (and `/landings/next/`) in a
queue per (project, queue), queue ∈ `QUEUES`, oldest first. It listens to
the process's event watcher (`push.waiting`): a commit of a type in
`WAKING_TYPES[queue]` in a project wakes the oldest parked waiter of that
project and queue — one per commit, never the herd. What happens next is a
*chain*, passed from waiter to waiter:

- The woken waiter tries to claim, then `settle(ticket, claimable=...)`:
  how many tasks anyone could still claim in the project (after a success:
  others remain; after a refusal — labels, a path reservation, a lost race —
  a task is there but not for this waiter). The chain wakes the next waiter
  of that project and queue that it has not woken yet when more are
  claimable than the other waiters *carrying* a wake of that project and
  queue (woken, still trying) can take, one each: so a claimable task is
  never stranded while someone who could take it waits (the last carrier
  to settle sees no other beside it), no waiter is tried twice for one
  event, and four commits of four tasks are four wakes, not one more for
  each claim still uncommitted when a winner looked. A count that reached
  what its reader counts up to (`counted`) is "at least": the wake goes on.
  A project found finished (`finished`) passes the wake only to the
  waiters that answer a finished project (`until_empty`): an idle fleet's
  hundred parked runners are not each woken to find nothing when the last
  task is done.
- A waiter that goes away while it owes an answer (client gone, error) is
  `close`d, which passes the chain on.
- An event that arrives while a waiter is trying (not parked) is not lost,
  and not served twice. Its chain reaches that waiter if it parks before
  the chain ends. A chain passed on when no parked waiter is left to carry
  it is *dropped*: the registry keeps it while a waiter that has not tried
  it is still trying since before it came (`Ticket.looked`), and `park`
  hands it to that waiter at once. A waiter is never woken for a wake that
  a parked waiter carried to its end, so one trying during four commits is
  not woken again for each (under load, those extra wakes grew into the
  herd).

The door's side (`api.claim_wait.wait_for_claim` runs it for a view):

    registry = claim_waiters()
    ticket = registry.ticket(projects=frozenset({project.pk}), queue="work")  # before the first try
    try:
        while True:
            answer = try_claim()                           # the view's own claim; None: nothing for me
            if ticket.chain is not None:                   # this try answered a wake
                registry.settle(ticket, claimable=count_claimable())
            if answer is not None or deadline passed:
                return answer or 204
            woken = threading.Event()
            cancel = registry.park(ticket, woken.set)      # or under the parking worker: park(subscribe=...)
            woken.wait(remaining); cancel()
    finally:
        registry.close(ticket)

For the "land" queue (`POST /landings/next/`): the lander's view calls
`api.claim_wait.wait_for_claim(request, project_ids=..., queue="land",
seconds=..., try_claim=..., count_claimable=...)` exactly as the claim views do;
`WAKING_TYPES["land"]` lists what wakes it (a task delivered, a landing
ending: landed, conflict, check failed, target moved, expired, released).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ledger.models import EventType
from push.waiting import Committed, event_watcher

logger = logging.getLogger(__name__)

QUEUES = ("work", "review", "land")

# Ended attempts free their task (and its paths, its environment) for the next claim.
_ATTEMPT_ENDED = {
    EventType.ATTEMPT_EXPIRED,
    EventType.ATTEMPT_RELEASED,
    EventType.ATTEMPT_FINISHED,
    EventType.ATTEMPT_REVOKED,
    EventType.ATTEMPT_DISCARDED,
}

# The event types that can make something claimable in a queue. Anything else (notes, git facts, claims,
# comments, findings, renewals) never wakes a waiter.
WAKING_TYPES: dict[str, frozenset[str]] = {
    "work": frozenset(
        {
            *_ATTEMPT_ENDED,
            EventType.TASK_CREATED,
            EventType.TASK_STATUS_CHANGED,  # to ready, or a blocker done
            EventType.TASK_UPDATED,  # labels, class, priority, paths
            EventType.TASK_DEPENDENCY_REMOVED,
            EventType.TASK_REASSIGNED,
            EventType.TASK_RESERVATION_CLEARED,
            EventType.TASK_QUARANTINE_RELEASED,
            EventType.REVIEW_CHANGES_REQUESTED,
            EventType.BUDGET_SET,
            EventType.ENVIRONMENT_CREATED,
            EventType.ENVIRONMENT_RELEASED,
            EventType.ENVIRONMENT_RESTORED,
            EventType.AGENT_PROJECTS_CHANGED,
            EventType.AGENT_REACTIVATED,
            EventType.LANDING_CONFLICT,  # the task goes back to ready
            EventType.LANDING_CHECK_FAILED,
        }
    ),
    "review": frozenset(
        {
            *_ATTEMPT_ENDED,
            EventType.REVIEW_REQUESTED,
            EventType.REVIEW_SUPERSEDED,
            EventType.TASK_STATUS_CHANGED,
            EventType.TASK_QUARANTINE_RELEASED,
            EventType.AGENT_PROJECTS_CHANGED,
        }
    ),
    # A task delivered, or a landing ending (the target is free again): the lead's `/landings/next/`.
    "land": frozenset(
        {
            EventType.TASK_DELIVERED,
            EventType.TASK_STATUS_CHANGED,
            EventType.TASK_LANDED,
            EventType.LANDING_CONFLICT,
            EventType.LANDING_CHECK_FAILED,
            EventType.LANDING_TARGET_MOVED,
            EventType.LANDING_EXPIRED,
            EventType.ATTEMPT_RELEASED,  # a landing given back (`landing_release`)
            EventType.LANDING_SETTINGS_CHANGED,
            EventType.ATTEMPT_FINISHED,
            EventType.TASK_QUARANTINE_RELEASED,
        }
    ),
}


@dataclass(eq=False)
class Chain:
    """One wake travelling through the waiters of (project, queue): whom it has woken so far."""

    project: int
    queue: str
    tried: set[int] = field(default_factory=set)
    # When it was heard (`ClaimWaiters._heard`): a waiter that looked later saw what it wakes for.
    origin: int = 0
    # Set once the project was found finished with nothing claimable: only waiters that answer a finished
    # project (`until_empty`) can use the wake; the others would re-read for nothing.
    until_empty_only: bool = False


@dataclass(eq=False)
class Ticket:
    """One waiting request, from before its first try until it answers (it survives parking)."""

    key: int
    projects: frozenset[int]
    queue: str
    # `ClaimWaiters._heard` when this waiter last looked: before its first try, and each time it was woken.
    looked: int
    wake: Callable[[], None] | None = None  # set while parked
    chain: Chain | None = None  # the wake this waiter owes an answer for
    closed: bool = False
    until_empty: bool = False  # it answers 204 when the project's work is finished


class ClaimWaiters:
    def __init__(self, listen: Callable[[Callable[[Committed], None]], Callable[[], None]] | None = None) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[int, str], OrderedDict[int, Ticket]] = {}
        self._heard = 0  # wakes heard from the watcher so far (`Chain.origin`, `Ticket.looked`)
        # Per (project, queue): chains passed on with no parked waiter left to carry them (see `park`).
        self._dropped: dict[tuple[int, str], list[Chain]] = {}
        self._live: dict[int, Ticket] = {}  # every ticket not closed, parked or trying
        self._carrying: dict[tuple[int, str], int] = {}  # per (project, queue): woken waiters owing an answer
        self._next_key = 0
        self._listen = listen if listen is not None else (lambda listener: event_watcher().listen(listener))
        self._unlisten: Callable[[], None] | None = None
        self.wakes = 0  # every wake handed out, for tests and the bench

    # --- the door's side ----------------------------------------------------

    def ticket(self, *, projects: Iterable[int], queue: str, until_empty: bool = False) -> Ticket:
        """A waiter about to try for the first time; take it before that try, so nothing committed after is missed."""
        if queue not in QUEUES:
            raise ValueError(f"Unknown queue {queue!r}.")
        projects = frozenset(projects)
        with self._lock:
            key = self._next_key
            self._next_key += 1
            ticket = Ticket(key, projects, queue, self._heard, until_empty=until_empty)
            self._live[key] = ticket
            if self._unlisten is None:
                # Under the lock: the watcher calls `committed` outside its own lock, so no cycle.
                self._unlisten = self._listen(self.committed)
        return ticket

    def park(self, ticket: Ticket, wake: Callable[[], None]) -> Callable[[], None]:
        """Queue the waiter until a wake; `wake()` at once when a chain it has not tried was dropped since it last
        looked (it then carries that chain).

        Returns the cancel (safe after a wake, and twice)."""
        fire: Chain | None = None
        with self._lock:
            if ticket.closed:
                return lambda: None
            for project in sorted(ticket.projects):
                fire = self._dropped_for(ticket, project)
                if fire is not None:
                    fire.tried.add(ticket.key)
                    break
            if fire is None:
                ticket.wake = wake
                for project in ticket.projects:
                    self._queues.setdefault((project, ticket.queue), OrderedDict())[ticket.key] = ticket
            else:
                self._woken(ticket, fire)
        if fire is not None:
            wake()
        return lambda: self._cancel(ticket)

    def settle(self, ticket: Ticket, *, claimable: int, counted: int = 1, finished: bool = False) -> None:
        """The woken waiter has tried. `claimable`: what anyone could still claim in the project, counted up to
        `counted` (reached: at least that many). The wake goes on when that is more than the other waiters
        carrying a wake of the project and queue can take (one each; each settles in turn, and the last sees
        none beside it), or when the count was cut. Nothing claimable and the project `finished`: on, to a
        waiter that answers a finished project only."""
        with self._lock:
            chain = self._unchain(ticket)
            if chain is None:
                go = False
            elif claimable:
                go = claimable >= counted or claimable > self._carrying.get((chain.project, chain.queue), 0)
            else:
                chain.until_empty_only = True
                go = finished
            wake = self._pass_on(chain) if chain is not None and go else None
        if wake is not None:
            wake()

    def close(self, ticket: Ticket) -> None:
        """The waiter is done (answered, gone, failed); a wake it still owed an answer for goes on."""
        with self._lock:
            if ticket.closed:
                return
            ticket.closed = True
            self._remove(ticket)
            chain = self._unchain(ticket)
            wake = self._pass_on(chain) if chain is not None else None
            self._live.pop(ticket.key, None)
            if not self._live and self._unlisten is not None:
                self._unlisten()
                self._unlisten = None
        if wake is not None:
            wake()

    def waiting(self, project: int | None = None, queue: str | None = None) -> int:
        """Parked waiters, in all or one project and queue."""
        with self._lock:
            keys = {
                key
                for (p, q), tickets in self._queues.items()
                if (project is None or p == project) and (queue is None or q == queue)
                for key in tickets
            }
            return len(keys)

    # --- the watcher's side ---------------------------------------------------

    def committed(self, heard: Committed) -> None:
        """Events committed (`push.waiting` listener): one wake per project and queue that a type can serve."""
        to_wake: list[Callable[[], None]] = []
        with self._lock:
            if heard is None:  # the listener (re)connected: anything may have happened anywhere
                pairs = {(project, t.queue) for t in self._live.values() for project in t.projects}
            else:
                pairs = {
                    (project, queue)
                    for project, types in heard.items()
                    for queue in QUEUES
                    if types is None or not types.isdisjoint(WAKING_TYPES[queue])
                }
            self._heard += 1
            for pair in pairs:
                wake = self._pass_on(Chain(*pair, origin=self._heard))
                if wake is not None:
                    to_wake.append(wake)
        for wake in to_wake:
            wake()

    # --- with the lock held ---------------------------------------------------

    def _pass_on(self, chain: Chain) -> Callable[[], None] | None:
        """The oldest parked waiter of the chain's queue it has not woken yet, woken (its wake returned); with
        none left, the chain is dropped for the waiters still trying since before it (`park`)."""
        pair = (chain.project, chain.queue)
        for key, ticket in self._queues.get(pair, {}).items():
            if key not in chain.tried and (ticket.until_empty or not chain.until_empty_only):
                chain.tried.add(key)
                wake = ticket.wake
                self._woken(ticket, chain)
                return wake
        if self._needed(chain):
            dropped = self._dropped.setdefault(pair, [])
            if chain not in dropped:
                dropped.append(chain)
        return None

    def _dropped_for(self, ticket: Ticket, project: int) -> Chain | None:
        """A dropped chain of (project, the ticket's queue) that this parking waiter needs; the chains that no
        waiter needs any more are forgotten on the way."""
        pair = (project, ticket.queue)
        dropped = self._dropped.get(pair)
        if not dropped:
            return None
        dropped[:] = [chain for chain in dropped if self._needed(chain)]
        if not dropped:
            del self._dropped[pair]
            return None
        return next((chain for chain in dropped if self._needs(ticket, chain)), None)

    def _needed(self, chain: Chain) -> bool:
        """Whether a waiter still trying may have missed what the dropped chain wakes for."""
        return any(self._needs(ticket, chain) for ticket in self._live.values())

    @staticmethod
    def _needs(ticket: Ticket, chain: Chain) -> bool:
        """Whether the waiter may have missed what the chain wakes for: it last looked before the chain was
        heard, has not tried it, waits in its project and queue, and can use it."""
        return (
            ticket.looked < chain.origin
            and ticket.key not in chain.tried
            and ticket.queue == chain.queue
            and chain.project in ticket.projects
            and (ticket.until_empty or not chain.until_empty_only)
        )

    def _woken(self, ticket: Ticket, chain: Chain) -> None:
        self._remove(ticket)
        ticket.chain = chain
        pair = (chain.project, chain.queue)
        self._carrying[pair] = self._carrying.get(pair, 0) + 1
        ticket.looked = self._heard
        self.wakes += 1

    def _unchain(self, ticket: Ticket) -> Chain | None:
        """The wake the waiter owed an answer for, taken from it (it no longer carries one)."""
        chain, ticket.chain = ticket.chain, None
        if chain is not None:
            pair = (chain.project, chain.queue)
            self._carrying[pair] -= 1
            if not self._carrying[pair]:
                del self._carrying[pair]
        return chain

    def _remove(self, ticket: Ticket) -> None:
        ticket.wake = None
        for project in ticket.projects:
            queue = self._queues.get((project, ticket.queue))
            if queue is not None:
                queue.pop(ticket.key, None)
                if not queue:
                    del self._queues[(project, ticket.queue)]

    def _cancel(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.wake is not None:
                self._remove(ticket)


_registry: ClaimWaiters | None = None
_registry_lock = threading.Lock()


def claim_waiters() -> ClaimWaiters:
    """The process's one registry of claim waiters."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = ClaimWaiters()
        return _registry
