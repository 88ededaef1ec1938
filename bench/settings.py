"""Settings for the bench's helper processes when they must reach a database `base` does not name.

`config.settings.base` puts SQLite at `LEASEHOLD_DATA_DIR/leasehold.sqlite3`;
the smoke test runs against pytest's test database file instead, and its
agent and sweep processes name it with `LEASEHOLD_BENCH_SQLITE_PATH`.
Everything else is `base`, unchanged.
"""

from __future__ import annotations

import os

from config.settings.base import *  # noqa: F403
from config.settings.base import DATABASES

_sqlite_path = os.environ.get("LEASEHOLD_BENCH_SQLITE_PATH")
if _sqlite_path and DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["NAME"] = _sqlite_path
