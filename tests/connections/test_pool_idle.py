"""Idle pooled connections are returned promptly (SPEC §25), never past the pool's size.

PostgreSQL only (SQLite has no pool). A process with the application's settings (4 threads: a pool
of 5, `LEASEHOLD_DB_POOL_MAX_IDLE_SECONDS=1`) runs a burst on every thread at once, more threads
than the pool, then goes idle: the pool held at most 5 during the burst and is back at its
minimum within a few intervals (psycopg_pool closes one unused connection per interval), where the
default of psycopg_pool (10 minutes per connection) took an hour and a half.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, threading, time
import django
django.setup()
from django.db import connection, connections

def work():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.3)")
    connection.close()  # back to the pool, as at the end of a request

threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
pool = connections["default"].pool
after_burst = pool.get_stats()["pool_size"]
started = time.monotonic()
while pool.get_stats()["pool_size"] > 1 and time.monotonic() - started < 30:
    time.sleep(0.1)
print(json.dumps({"after_burst": after_burst, "idle_size": pool.get_stats()["pool_size"],
                  "returned_seconds": round(time.monotonic() - started, 1), "max_size": pool.max_size}))
"""


def test_a_burst_takes_at_most_the_pool_and_the_idle_connections_go_back_within_seconds():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no pool: each thread keeps its connection to the file")
    url = os.environ["DATABASE_URL"]  # the server's own database: the script reads no table
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEASEHOLD_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "LEASEHOLD_DEBUG": "1",
            "DATABASE_URL": url,
            "LEASEHOLD_WEB_THREADS": "4",
            "LEASEHOLD_DB_POOL_MAX_IDLE_SECONDS": "1",
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["max_size"] == 5  # 4 threads + 1 resume thread
    assert 1 < seen["after_burst"] <= 5  # eight at once: the pool grew, never past its size
    assert seen["idle_size"] == 1  # back to LEASEHOLD_DB_POOL_MIN
    assert seen["returned_seconds"] < 15  # one per 1 s interval: about 4 s, with room for a loaded machine
