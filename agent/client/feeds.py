"""The agent API's feeds and the rest (SPEC §8): the changes feed, search, the run heartbeat, metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, cast

from agent.client.connection import ApiConnection
from agent.client.errors import ConnectionFailed, LeaseholdError
from agent.client.models import Changes, Event, Page


class FeedCalls(ApiConnection):
    """Part of `agent.client.api.LeaseholdClient`."""

    # --- feeds and the rest ---------------------------------------------------------

    def changes(
        self,
        *,
        since: int = 0,
        project: str | None = None,
        limit: int | None = None,
        wait: int | None = None,
        tail: bool = False,
    ) -> Changes:
        """The delta feed; with `wait` (seconds, at most 30) the server holds an empty answer until an event comes."""
        params = {"since": since, "project": project, "limit": limit, "wait": wait, "tail": "true" if tail else None}
        timeout = (self._timeout or 0) + wait if wait else None
        return cast(Changes, self.request("GET", "/changes/", params=params, timeout=timeout))

    def iter_changes(
        self,
        *,
        since: int | None = None,
        project: str | None = None,
        wait: int = 25,
        stop: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Every event after `since` (None: from now on), as it commits, until `stop` is set; one long-poll at a time.

        Each call waits up to `wait` seconds on the server, which answers as
        soon as an event is visible, so an event arrives within moments of
        its commit without polling. A failed call (the server restarting) is
        retried after a pause; the position is never lost.
        """
        position = since
        while stop is None or not stop.is_set():
            try:
                if position is None:
                    position = self.changes(project=project, tail=True)["latest_event_id"]
                    continue
                page = self.changes(since=position, project=project, limit=200, wait=wait)
            except LeaseholdError as error:
                if not error.retryable and not isinstance(error, ConnectionFailed):
                    raise
                if stop is not None:
                    stop.wait(1.0)
                else:
                    time.sleep(1.0)
                continue
            yield from page["events"]
            position = page["latest_event_id"]

    def search(
        self, q: str, *, project: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> Page:
        params = {"q": q, "project": project, "cursor": cursor, "limit": limit}
        return cast(Page, self.request("GET", "/search/", params=params))

    def heartbeat(self, *, retries: int | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The run heartbeat: this agent process is alive (touches no lease)."""
        return cast(dict[str, Any], self.request("POST", "/agents/me/heartbeat/", retries=retries, timeout=timeout))

    def metrics(self, *, days: int | None = None, project: str | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", "/metrics/", params={"days": days, "project": project}))
