"""Test settings: only overrides of `base`."""

from __future__ import annotations

import os

os.environ.setdefault("LEASEHOLD_SECRET_KEY", "test-secret-key-not-for-production-0123456789")

from config.settings.base import *  # noqa: F403
from config.settings.base import DATA_DIR, DATABASES

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

_default = DATABASES["default"]
if _default["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not `:memory:`, so that threads with their own connections share
    # one database and see each other's commits, as in production.
    _default["TEST"] = {"NAME": str(DATA_DIR / "test-leasehold.sqlite3")}
else:
    _default["TEST"] = {"NAME": "test_leasehold"}

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
