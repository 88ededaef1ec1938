"""A change watcher of the test's own, listening for commits in one project (tests of `push.waiting`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import push.waiting


@contextmanager
def listening_watcher(project: Any) -> Iterator[threading.Event]:
    """A fresh `EventWatcher` with a listener; the event is set once a commit in `project` is heard."""
    watcher = push.waiting.EventWatcher()
    heard = threading.Event()
    unlisten = watcher.listen(lambda committed: heard.set() if committed and project.pk in committed else None)
    try:
        yield heard
    finally:
        unlisten()
        watcher.stop()


def calls_while_quiet(calls: list[Any], *, settle: float, window: float) -> int:
    """How many more entries `calls` gets in `window` seconds, once it has its first and `settle` has passed."""
    started = time.monotonic()
    while not calls and time.monotonic() - started < 10:
        time.sleep(0.01)
    time.sleep(settle)
    before = len(calls)
    time.sleep(window)
    return len(calls) - before
