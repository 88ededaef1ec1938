"""Waking the waiters of the changes feed when events commit (SPEC §18), one watcher per server process.

`event_watcher()` is the process's one `EventWatcher`. A waiter subscribes
with the feed position it has already read through and the projects it may
see (None: staff, every project); it is woken once, at the first committed
event beyond that position in one of those projects, and then reads the feed
again itself (the feed's own visibility and horizon rules decide what it
gets; a wake is only a hint, and a spurious one costs a re-read).

- PostgreSQL: one dedicated connection per process runs `LISTEN
  ledger_event`; the event table's statement trigger (migrations
  `ledger.0011`, `ledger.0014`) sends `NOTIFY ledger_event, '<highest id>
  <project ids>'`, which PostgreSQL delivers at COMMIT (never for a
  rolled-back insert), and nothing for a statement that inserted no row.
  If the connection drops, every waiter is woken (it re-reads, and parks
  again) and the watcher reconnects.
- SQLite: no notifications exist; while anyone waits, the watcher polls:
  it looks whether any connection has committed since its last look
  (`PRAGMA data_version`, no table read) and only then reads the new
  events' ids and projects — one indexed statement per process and commit,
  not one per waiter. On Linux the poll sleeps until the database's
  directory sees a write to the database or its WAL (inotify, `_Writes`), or
  `QUIET_POLL_SECONDS` at most; elsewhere it looks every `POLL_SECONDS`
  (50 ms). A commit writes its WAL frames before it becomes visible, so a
  write that shows no commit yet is looked at again `POLL_SECONDS` later.
  Each look wakes a thread, which on this kind of machine costs ~0.15 ms of
  CPU: twenty looks a second in each server process were a quarter of what
  1,000 idle runner slots cost the server (issue 34).

Listeners (`listen`) hear of every commit, with the event types per project
where they are known (SQLite's poll reads them; PostgreSQL's payload carries
them from migration `ledger.0015` on, None before it or when too many): the
claim waiters (`push.claim_waiters`) wake one waiter per project and queue,
and only for the types that can make something claimable. While a listener
is registered SQLite's poll keeps running.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection

from core.connections import listen_connection_params

logger = logging.getLogger(__name__)

CHANNEL = "ledger_event"
POLL_SECONDS = 0.05
# SQLite on Linux: the longest the poll sleeps with no write seen (a safety net; see `_Writes`).
QUIET_POLL_SECONDS = 0.25
RECONNECT_SECONDS = 1.0
# PostgreSQL: the longest the listener sleeps on its socket before it looks whether it should stop.
LISTEN_SECONDS = 1.0
# Events not tied to a project (agent and webhook administration) are visible to staff only.
NO_PROJECT = 0

# What a listener hears: per project, the committed events' types (None: not known, assume any);
# or None alone: anything may have committed anywhere (the listener reconnected).
Committed = Mapping[int, frozenset[str] | None] | None


@dataclass
class _Subscription:
    since: int
    projects: frozenset[int] | None
    wake: Callable[[], None]


class EventWatcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._has_subscribers = threading.Condition(self._lock)
        self._subscriptions: dict[int, _Subscription] = {}
        self._next_key = 0
        # The highest committed event id seen, overall and per project: a
        # subscriber whose events already arrived is woken at once.
        self._latest = 0
        self._latest_by_project: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._listeners: dict[int, Callable[[Committed], None]] = {}

    def stop(self) -> None:
        """End the watcher's thread and close its connection (tests, before dropping their database)."""
        with self._lock:
            self._stopping = True
            self._has_subscribers.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5.0)
        with self._lock:
            self._thread, self._stopping = None, False

    def subscribe(self, *, since: int, projects: frozenset[int] | None, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake()` once an event beyond `since` in one of `projects` commits; returns the unsubscribe."""
        subscription = _Subscription(since, projects, wake)
        with self._lock:
            self._ensure_thread()
            if self._seen_beyond(subscription):
                fire = True
            else:
                fire = False
                key = self._next_key
                self._next_key += 1
                self._subscriptions[key] = subscription
                self._has_subscribers.notify_all()
        if fire:
            wake()
            return lambda: None
        return lambda: self._unsubscribe(key)

    def listen(self, listener: Callable[[Committed], None]) -> Callable[[], None]:
        """Call `listener` (on the watcher's thread) at every commit until the returned unlisten is called."""
        with self._lock:
            self._ensure_thread()
            key = self._next_key
            self._next_key += 1
            self._listeners[key] = listener
            self._has_subscribers.notify_all()

        def unlisten() -> None:
            with self._lock:
                self._listeners.pop(key, None)

        return unlisten

    def wait(self, *, since: int, projects: frozenset[int] | None, timeout: float) -> bool:
        """Block this thread until woken or `timeout`; for servers that cannot park a request (runserver, tests)."""
        woken = threading.Event()
        unsubscribe = self.subscribe(since=since, projects=projects, wake=woken.set)
        try:
            return woken.wait(max(0.0, timeout))
        finally:
            unsubscribe()

    def waiting(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    def _unsubscribe(self, key: int) -> None:
        with self._lock:
            self._subscriptions.pop(key, None)

    def _seen_beyond(self, subscription: _Subscription) -> bool:
        if subscription.projects is None:
            return self._latest > subscription.since
        return any(self._latest_by_project.get(p, 0) > subscription.since for p in subscription.projects)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            target = self._listen if connection.vendor == "postgresql" else self._poll
            self._thread = threading.Thread(target=target, name="leasehold-event-watcher", daemon=True)
            self._thread.start()

    def _committed(self, latest: dict[int, int] | int, types: dict[int, frozenset[str]] | None = None) -> None:
        """Events committed: the highest new id per project, or (an int) up to this id in projects unknown;
        `types`, where known, the types committed per project."""
        to_wake: list[Callable[[], None]] = []
        with self._lock:
            listeners = list(self._listeners.values())
            by_project = latest if isinstance(latest, dict) else {}
            highest = max(by_project.values(), default=0) if isinstance(latest, dict) else latest
            self._latest = max(self._latest, highest)
            for project, event_id in by_project.items():
                self._latest_by_project[project] = max(self._latest_by_project.get(project, 0), event_id)
            for key, subscription in list(self._subscriptions.items()):
                if subscription.projects is None or not isinstance(latest, dict):
                    beyond = highest > subscription.since
                else:
                    beyond = any(by_project.get(p, 0) > subscription.since for p in subscription.projects)
                if beyond:
                    del self._subscriptions[key]
                    to_wake.append(subscription.wake)
        if listeners:
            heard: Committed = None
            if isinstance(latest, dict):
                heard = {project: (types or {}).get(project) for project in latest}
            self._tell(listeners, heard)
        for wake in to_wake:
            try:
                wake()
            except Exception:
                logger.exception("A change waiter's wake-up failed.")

    def _wake_everyone(self) -> None:
        with self._lock:
            woken = [s.wake for s in self._subscriptions.values()]
            self._subscriptions.clear()
            listeners = list(self._listeners.values())
        self._tell(listeners, None)
        for wake in woken:
            wake()

    @staticmethod
    def _tell(listeners: list[Callable[[Committed], None]], heard: Committed) -> None:
        for listener in listeners:
            try:
                listener(heard)
            except Exception:
                logger.exception("A commit listener failed.")

    # --- PostgreSQL: LISTEN on a connection of its own ----------------------

    def _listen(self) -> None:
        import psycopg

        # Its own session, straight to PostgreSQL (LEASEHOLD_LISTEN_DATABASE_URL behind a pooler).
        params = listen_connection_params()
        while not self._stopping:
            try:
                with psycopg.connect(**params, autocommit=True) as listener:
                    listener.execute(f"LISTEN {CHANNEL}")
                    # Anything committed while there was no listener: let every waiter look.
                    self._wake_everyone()
                    while not self._stopping:
                        # Sleep on the socket until PostgreSQL sends something (or a second, to see
                        # `stop`), then take what came. psycopg's own `notifies(timeout=...)` looks every
                        # 0.1 s while it waits: ten wakes a second per process at rest (issue 34).
                        select.select([listener.fileno()], [], [], LISTEN_SECONDS)
                        for notification in listener.notifies(timeout=0):
                            latest = _parse(notification.payload)
                            if latest is not None:
                                self._committed(latest, _parse_types(notification.payload))
            except Exception:
                if self._stopping:
                    break
                logger.warning("The change listener lost its connection; reconnecting.", exc_info=True)
                self._wake_everyone()
                time.sleep(RECONNECT_SECONDS)

    # --- SQLite: a short poll while anyone waits ----------------------------

    def _poll(self) -> None:
        last = self._max_event_id()
        version: int | None = None  # `PRAGMA data_version` when the events were last read
        writes = _Writes(connection.settings_dict["NAME"])
        wrote = False  # the last sleep ended at a write to the database
        try:
            while not self._stopping:
                with self._lock:
                    while not self._subscriptions and not self._listeners and not self._stopping:
                        self._has_subscribers.wait()
                if self._stopping:
                    break
                last, version, committed = self._look(last, version)
                # A write with no commit to show yet may be a commit still being made: look again soon.
                soon = not writes.watching or (wrote and not committed)
                wrote = writes.wait(POLL_SECONDS if soon else QUIET_POLL_SECONDS)
        finally:
            writes.close()
            connection.close()

    def _look(self, last: int, version: int | None) -> tuple[int, int | None, bool]:
        """One look of the poll: (the highest event id read, `data_version`, whether anything committed)."""
        try:
            seen, version = version, _data_version()
            if version == seen:  # no connection has committed anything since the last read
                return last, version, False
            rows = _events_since(last)
            if rows:
                latest: dict[int, int] = {}
                types: dict[int, set[str]] = {}
                for project, event_type, event_id in rows:
                    latest[project] = max(latest.get(project, 0), event_id)
                    types.setdefault(project, set()).add(event_type)
                last = max(latest.values())
                self._committed(latest, {project: frozenset(names) for project, names in types.items()})
            return last, version, True
        except Exception:
            logger.warning("The change poll failed; trying again.", exc_info=True)
            connection.close()
            self._wake_everyone()
            return last, None, False  # a new connection's data_version starts afresh

    @staticmethod
    def _max_event_id() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT coalesce(max(id), 0) FROM ledger_event")
            (latest,) = cursor.fetchone()
        return int(latest)


class _Writes:
    """What the SQLite poll sleeps on: until the database or its WAL is written, or a timeout.

    On Linux, inotify on the database's directory (a WAL database's commits
    write its `-wal` file; a rollback-journal one's the file itself), so a
    commit wakes the poll at once and a quiet database lets it sleep. Where
    inotify is missing (another OS, a database in memory) it sleeps the
    timeout it is given, and `watching` is False.
    """

    def __init__(self, path: Any) -> None:
        self._inotify: Any = None
        self._names: frozenset[str] = frozenset()
        path = str(path)
        if not os.path.isfile(path):
            return
        try:
            from inotify_simple import INotify, flags

            watcher = INotify()
        except (ImportError, OSError, AttributeError):  # not Linux, or no inotify instance left
            return
        try:
            watcher.add_watch(os.path.dirname(os.path.abspath(path)), flags.MODIFY | flags.CREATE | flags.MOVED_TO)
        except OSError:
            watcher.close()
            return
        name = os.path.basename(path)
        self._inotify, self._names = watcher, frozenset({name, f"{name}-wal"})

    @property
    def watching(self) -> bool:
        return self._inotify is not None

    def wait(self, timeout: float) -> bool:
        """Sleep until the database is written (True) or `timeout` seconds pass (False)."""
        if self._inotify is None:
            time.sleep(timeout)
            return False
        until = time.monotonic() + timeout
        while (left := until - time.monotonic()) > 0:
            # Other files of the directory (a log, another database) wake it too; they are passed over.
            if any(event.name in self._names for event in self._inotify.read(timeout=max(1, round(left * 1000)))):
                return True
        return False

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


def _data_version() -> int:
    """SQLite's `PRAGMA data_version` on this thread's connection: it changes when any other connection (any
    thread, any process) commits to the database, so an unchanged value means no event can have been added.
    A poll that finds nothing committed costs this one pragma (issue 34: 1,000 idle runner slots)."""
    (version,) = _raw_sqlite().execute("PRAGMA data_version").fetchone()
    return int(version)


def _events_since(last: int) -> list[tuple[int, str, int]]:
    """(project id or 0, type, highest id) of the events after `last`: the poll's read after a commit (any
    commit: a heartbeat's or a renewal's too, so it stays on the driver's connection, without Django's cursor)."""
    rows = _raw_sqlite().execute(
        "SELECT coalesce(project_id, 0), type, max(id) FROM ledger_event WHERE id > ? GROUP BY 1, 2", (last,)
    )
    return [(int(project), str(event_type), int(event_id)) for project, event_type, event_id in rows.fetchall()]


def _raw_sqlite() -> Any:
    """This thread's sqlite3 connection (Django's, opened if need be; the poll only reads, in autocommit)."""
    connection.ensure_connection()
    return connection.connection


def _parse(payload: str) -> dict[int, int] | int | None:
    """`'<highest id> <project ids>'` from the trigger: the statement's highest id, for each of its projects.

    None for an empty payload: what the trigger before `ledger.0014` sent for
    a statement that inserted no row (the lease sweep's INSERT ... SELECT,
    every minute); nothing committed, so no one is woken.
    """
    if not payload.strip():
        return None
    latest, _, projects = payload.partition(" ")
    projects = projects.partition(" ")[0]
    if not projects or projects == "*":
        return int(latest)
    return {int(p): int(latest) for p in projects.split(",")}


def _parse_types(payload: str) -> dict[int, frozenset[str]] | None:
    """The third part of the payload (`ledger.0015`): `<project>:<type>,...`; None when absent."""
    parts = payload.split(" ")
    if len(parts) < 3 or not parts[2]:
        return None
    types: dict[int, set[str]] = {}
    for pair in parts[2].split(","):
        project, _, event_type = pair.partition(":")
        if project.isdigit() and event_type:
            types.setdefault(int(project), set()).add(event_type)
    return {project: frozenset(names) for project, names in types.items()}


_watcher: EventWatcher | None = None
_watcher_lock = threading.Lock()


def event_watcher() -> EventWatcher:
    global _watcher
    with _watcher_lock:
        if _watcher is None:
            _watcher = EventWatcher()
        return _watcher
