"""The runner's log: one line per event on stderr (`leasehold runner: slot 2: claimed WEB-4 …`), and with
`--json` one JSON object per event on stdout (`{"time", "event", "slot", …}`), for a log shipper."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO


class EventLog:
    """Thread-safe: the slots, the heartbeat and the main thread all write to it."""

    def __init__(self, *, as_json: bool = False, text: TextIO | None = None, machine: TextIO | None = None) -> None:
        self.as_json = as_json
        self._text = text
        self._machine = machine
        self._lock = threading.RLock()  # a signal handler may log while the main thread is logging

    def event(self, kind: str, message: str, *, slot: int | None = None, **fields: Any) -> None:
        prefix = "leasehold runner: " + (f"slot {slot}: " if slot is not None else "")
        with self._lock:
            print(prefix + message, file=self._text or sys.stderr, flush=True)
            if self.as_json:
                record = {"time": round(time.time(), 3), "event": kind, "slot": slot, "message": message, **fields}
                print(json.dumps(record, default=str), file=self._machine or sys.stdout, flush=True)
