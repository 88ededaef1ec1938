"""Test settings: only overrides of `base`."""

from __future__ import annotations

import os

os.environ.setdefault("LEASEHOLD_SECRET_KEY", "test-secret-key-not-for-production-0123456789")

from config.settings.base import *  # noqa: F403
from config.settings.base import DATA_DIR, DATABASES

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# One test database per test process, so that runs in parallel (two
# checkouts, a developer and an editor plugin) never share one.
_default = DATABASES["default"]
if _default["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not `:memory:`, so that threads with their own connections share
    # one database and see each other's commits, as in production.
    _default["TEST"] = {"NAME": str(DATA_DIR / f"test-leasehold-{os.getpid()}.sqlite3")}
else:
    _default["TEST"] = {"NAME": f"test_leasehold_{os.getpid()}"}

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# WhiteNoise warns about a missing static root; tests serve static files through the finders.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405

# The tests' webhook receivers listen on loopback (SPEC §18: "tests set it").
LEASEHOLD_WEBHOOK_ALLOW_PRIVATE = True

# The tests play many clients inside one process (20 parked claim waiters, 40 writers in threads): the pool
# is sized for them, not for one production worker's threads (core.connections), or the threads past the
# budget queue for a connection and a test's deadline ends first.
if "pool" in _default.get("OPTIONS", {}):
    _default["OPTIONS"]["pool"]["max_size"] = max(_default["OPTIONS"]["pool"]["max_size"], 48)
