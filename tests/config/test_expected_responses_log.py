"""A client's mistakes do not flood the operator's log (issue 27, L8).

A bad `Host` header used to log a 1 KB traceback (100 requests, 106 KB);
every 4xx a Django warning line and every 403 a traceback. Now a refused
`Host` is one warning line, and other 4xx are INFO lines without traceback
(not shown at the default WARNING level). Run in a real process with the
settings' own logging configuration.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from config.logs import ExpectedResponses, logging_config

ROOT = Path(__file__).resolve().parents[2]
CLIENT_MISTAKES = """
import django
django.setup()
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
client = Client(HTTP_HOST="localhost")
statuses = [client.get("/admin/login/", HTTP_HOST="evil.example.com").status_code for _ in range(100)]
statuses.append(client.get("/api/v1/no-such-thing/").status_code)
statuses.append(client.get("/no-such-page/").status_code)
strict = Client(enforce_csrf_checks=True, HTTP_HOST="localhost")
statuses.append(strict.post("/admin/login/", {"username": "x"}).status_code)
clerk = User.objects.create_user("clerk", password="pw", is_staff=True)  # staff, but without permissions
client.force_login(clerk)
statuses.append(client.get("/admin/auth/user/add/").status_code)
print("STATUSES", sorted(set(statuses)), flush=True)
"""


def test_a_hundred_bad_host_headers_log_a_hundred_short_lines_and_other_4xx_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update(
        {
            "LEASEHOLD_DATA_DIR": str(tmp_path),
            "LEASEHOLD_SECRET_KEY": "a-production-secret-key-that-is-long-and-random-enough-0123456789",
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
        }
    )
    (tmp_path / "static").mkdir()
    result = subprocess.run(
        [sys.executable, "-c", CLIENT_MISTAKES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert "STATUSES [400, 403, 404]" in result.stdout, result.stdout + result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert result.stderr.count("Traceback") == 0, result.stderr[:3000]  # a count: no diff of a long text
    host_lines = [line for line in lines if "Invalid HTTP_HOST header" in line]
    assert len(host_lines) == 100, result.stderr[:3000]
    assert len(lines) == 100, [line for line in lines if "Invalid HTTP_HOST" not in line]
    assert all(len(line) < 300 for line in lines)


def _record(name: str, level: int, status: int | None, exc: bool = True) -> logging.LogRecord:
    try:
        raise PermissionError("refused")
    except PermissionError:
        exc_info = sys.exc_info() if exc else None
    record = logging.LogRecord(name, level, __file__, 1, "Forbidden (%s): %s", ("Permission denied", "/x"), exc_info)
    if status is not None:
        record.status_code = status
    return record


def test_the_filter_weighs_each_answer():
    quiet, verbose = ExpectedResponses("WARNING"), ExpectedResponses("INFO")
    assert not quiet.filter(_record("django.request", logging.WARNING, 403))
    shown = _record("django.request", logging.WARNING, 403)
    assert verbose.filter(shown)
    assert (shown.levelno, shown.exc_info) == (logging.INFO, None)
    assert shown.getMessage() == "Forbidden (Permission denied): /x"
    assert not verbose.filter(_record("django.request", logging.ERROR, 503))  # STORAGE_BUSY: logged at its cause
    failure = _record("django.request", logging.ERROR, 500)
    assert quiet.filter(failure)
    assert failure.exc_info is not None  # a real failure keeps its traceback
    security = _record("django.security.DisallowedHost", logging.ERROR, 400)
    assert quiet.filter(security)
    assert (security.levelno, security.exc_info) == (logging.WARNING, None)


def test_json_lines_go_through_the_same_filter():
    config = logging_config(json_lines=True, level="WARNING")
    assert config["handlers"]["console"]["filters"] == ["expected_responses"]
    assert config["loggers"]["django"]["propagate"] is False
    record = _record("django.security.DisallowedHost", logging.ERROR, 400)
    ExpectedResponses("WARNING").filter(record)
    from config.logs import JsonFormatter

    assert "exception" not in json.loads(JsonFormatter().format(record))
