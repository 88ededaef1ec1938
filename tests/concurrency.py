"""Run a function in real threads, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections


def run_in_threads(count: int, work: Callable[[int], Any], *, timeout: float = 120) -> list[Any]:
    """Start `count` threads together; each calls `work(i)`. Returns results or exceptions, by index."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[index] = work(index)
        except BaseException as exc:  # reported to the caller, who asserts on it
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a worker thread hung"
    return results
