"""The run heartbeat (SPEC §13): this agent process is alive, said in the background while `run` or `mcp` works."""

from __future__ import annotations

import threading
import time

from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError


class Heartbeat:
    """The run heartbeat (`POST /agents/me/heartbeat/`) every `every_seconds`, in the background.

    It says the agent process is alive and touches no lease; a failed beat is
    only remembered (`last_error`), the next one is tried on schedule.
    """

    def __init__(self, client: LeaseholdClient, *, every_seconds: float = 30.0) -> None:
        self.client = client
        self.every_seconds = max(0.1, every_seconds)
        self.sent = 0
        self.last_error: LeaseholdError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="leasehold-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)  # a beat in flight may be dropped: the thread is a daemon

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.client.heartbeat(retries=0, timeout=min(10.0, self.every_seconds))
                self.sent += 1
                self.last_error = None
            except LeaseholdError as error:
                self.last_error = error
            self._stop.wait(max(0.0, self.every_seconds - (time.monotonic() - started)))
