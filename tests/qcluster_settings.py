"""Settings for a real `qcluster` started by a test: the test's own database and a prompt scheduler.

The test passes its database name in `LEASEHOLD_QCLUSTER_TEST_DB` (a file path
on SQLite, a database name on PostgreSQL), so the cluster sees the rows the
test committed. django-q2 calls its scheduler once its guard loop has counted
30 seconds; a 30-second guard cycle makes that the very first cycle, so a
due schedule runs right after start-up instead of half a minute later.

No psycopg connection pool: django-q2 forks its workers, monitor and pusher
after `connections.close_all()`, which hands a pooled connection back to the
pool instead of closing it, so every child inherits the same open socket
and their queries corrupt each other ("Failed to pull task from broker",
"connection in transaction status INTRANS"). A cluster process must run
unpooled; see docs/operations.md.
"""

from __future__ import annotations

import os

from config.settings.test import *  # noqa: F403
from config.settings.test import DATABASES, Q_CLUSTER

DATABASES["default"]["NAME"] = os.environ["LEASEHOLD_QCLUSTER_TEST_DB"]
DATABASES["default"].get("OPTIONS", {}).pop("pool", None)

Q_CLUSTER = {**Q_CLUSTER, "name": "leasehold-test", "workers": 1, "poll": 0.1, "guard_cycle": 30}
