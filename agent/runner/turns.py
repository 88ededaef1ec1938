"""Which idle work slot of a runner parks the server-side claim wait (SPEC §24: idle runners cost the server little).

An idle runner keeps **one** parked claim per project it serves, not one per slot. Each work slot, before it
claims, takes the project's *turn* (`ParkingTurns.take`): the first project, in its rotation's order, that no
other slot of this runner is parked on. It then claims as before — at once on the other projects, and with the
server-side wait (`wait_seconds`) on its turn's project — with its **own** token, so the claim, its lease, its
fencing and its `requires` check belong to that slot's agent exactly as before (every slot of a runner carries
the runner's labels, so whichever slot parks sees exactly the tasks any of them could claim). A slot that finds
every project's turn taken waits here, in the runner, sending nothing, until a turn is given back:

- when the parked claim answers with a task, its slot gives the turn back and runs the task; a waiting slot
  takes the turn and claims at once (the server's first try comes before it parks), so a burst of tasks is
  handed to the idle slots one claim after another;
- when the wait ends with nothing (204), the turn is given back and taken again (by the same slot or another);
- a refusal, a pause, a drain or a fenced slot gives it back too; `wake_all` (the daemon, on a drain or when the
  console cordons, drains or resumes the runner) wakes every waiting slot so it can see why.

Ten idle slots on one project thus cost the server one parked request and one re-ask per `wait_seconds`
instead of ten; what a burst of tasks waits for is one claim per task already taken (tens of milliseconds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

# A waiting slot looks again this often even without a wake (a safety net: every change wakes it).
RECHECK_SECONDS = 60.0


class ParkingTurns:
    """The runner's parking turns, one per project; safe to call from every slot's thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._parked: dict[str, int] = {}  # project slug -> the slot number parked on it

    def take(self, preference: Sequence[str], slot: int, *, give_up: Callable[[], bool]) -> str | None:
        """The first project in `preference` whose turn is free, now this slot's; waits while none is.
        None when `give_up()` says so (the runner drains or is paused): the slot holds no turn then."""
        with self._changed:
            while True:
                if give_up():
                    return None
                for slug in preference:
                    if slug not in self._parked:
                        self._parked[slug] = slot
                        return slug
                self._changed.wait(RECHECK_SECONDS)

    def give_back(self, slug: str, slot: int) -> None:
        """This slot's turn on `slug` is over: a waiting slot may take it."""
        with self._changed:
            if self._parked.get(slug) == slot:
                del self._parked[slug]
            self._changed.notify_all()

    def wake_all(self) -> None:
        """Every waiting slot looks again (a drain began, or the console paused or resumed the runner)."""
        with self._changed:
            self._changed.notify_all()

    def parked(self) -> dict[str, int]:
        """Who holds which turn now (for the tests and the log)."""
        with self._changed:
            return dict(self._parked)
