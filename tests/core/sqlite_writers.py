"""A child process for the cross-process SQLite writer test: threads incrementing one counter.

Run as `python -m tests.core.sqlite_writers SLUG THREADS WRITES` with
DJANGO_SETTINGS_MODULE=tests.qcluster_settings and LEASEHOLD_QCLUSTER_TEST_DB
naming the test's database file. Every connection gets a 1 ms busy timeout,
so a writer that had to wait inside SQLite would fail almost at once; prints
`<committed> <storage_busy>`.
"""

from __future__ import annotations

import sys
import threading
import time

import django


def main(slug: str, threads: int, writes: int) -> None:
    django.setup()
    from django.db import connection, connections
    from django.db.models import F

    from core.db import write_transaction
    from core.errors import StorageBusy
    from ledger.models import Project

    @write_transaction
    def increment() -> None:
        Project.objects.filter(slug=slug).update(queue_wait_max_seconds=F("queue_wait_max_seconds") + 1)
        time.sleep(0.001)  # some work inside the write transaction, as a service has

    counts = {"committed": 0, "busy": 0}
    lock = threading.Lock()

    def body() -> None:
        connection.ensure_connection()
        connection.cursor().execute("PRAGMA busy_timeout = 1")
        for _ in range(writes):
            try:
                increment()
                outcome = "committed"
            except StorageBusy:
                outcome = "busy"
            with lock:
                counts[outcome] += 1
        connections.close_all()

    workers = [threading.Thread(target=body) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(counts["committed"], counts["busy"])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
