"""`LEASEHOLD_LOG_FORMAT=json`: one JSON object per log line (SPEC §18), for the web server, the API and the jobs.

Every record carries `time`, `level`, `logger`, `message`, and whatever the
request log (`api.request_log`) attached: `request_id`, `method`, `path`,
`status`, `duration_ms`, `agent`, `attempt`, `code`. Tokens never reach a
log: no header, query string or body is logged, and as a second guard any
agent token (`lh_…`) or webhook secret (`lhwh_…`) that still finds its way
into a message is replaced by its prefix and `[redacted]`.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

# The prefixes of ledger.tokens (agent tokens) and push.webhooks (signing secrets).
_SECRETS = re.compile(r"\b(lhwh_|lh_)[A-Za-z0-9_-]{16,}")
REQUEST_FIELDS = ("request_id", "method", "path", "status", "duration_ms", "agent", "attempt", "code")


def redact(text: str) -> str:
    return _SECRETS.sub(lambda match: f"{match.group(1)}[redacted]", text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
            "process": record.process,
        }
        for name in REQUEST_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, separators=(",", ":"), default=str)


# Django's loggers of answers (a refused CSRF token is a 403 like any other).
_RESPONSE_LOGGERS = frozenset({"django.request", "django.security.csrf"})


class ExpectedResponses(logging.Filter):
    """Django's lines about answers the server meant to give, at their weight and in one line each.

    Django logs every 4xx as a warning on `django.request` (a 403 with its
    traceback, a CSRF refusal on `django.security.csrf`), a refused `Host`
    header on `django.security.DisallowedHost` with a 1 KB traceback, and
    every 503 as an error. A client's mistake is
    not the operator's: 4xx lines become INFO (shown only when the log level
    is INFO), without traceback; security events stay warnings, in one line;
    503s (`STORAGE_BUSY`) are dropped, their cause being logged once per burst
    where it is decided (`api.errors`). Everything else passes unchanged.
    """

    def __init__(self, level: str = "WARNING") -> None:
        super().__init__()
        self.level = logging.getLevelName(level)

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.name not in _RESPONSE_LOGGERS or not isinstance(status, int):
            if record.name.startswith("django.security."):
                _one_line(record, logging.WARNING)
            return True
        if status == 503:
            return False
        if status < 500:
            if self.level > logging.INFO:
                return False
            _one_line(record, logging.INFO)
        return True


def _one_line(record: logging.LogRecord, level: int) -> None:
    message = record.getMessage().splitlines()
    record.msg, record.args = (message[0][:500] if message else ""), None
    record.exc_info, record.exc_text, record.stack_info = None, None, None
    record.levelno, record.levelname = level, logging.getLevelName(level)


def logging_config(*, json_lines: bool, level: str) -> dict[str, Any]:
    """Django's LOGGING (and, through `gunicorn_logging`, gunicorn's own) for the chosen format.

    Django's own loggers write through the same handler (not Django's default
    ones, which print in their own format and skip the filter).
    """
    formatter = {"()": "config.logs.JsonFormatter"} if json_lines else {"format": "%(message)s"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"leasehold": formatter},
        "filters": {"expected_responses": {"()": "config.logs.ExpectedResponses", "level": level}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "leasehold", "filters": ["expected_responses"]}
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "django-q": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }


def gunicorn_logging() -> dict[str, Any]:
    """gunicorn's loggers as JSON lines too (`manage.py serve` passes this with LEASEHOLD_LOG_FORMAT=json)."""
    config = logging_config(json_lines=True, level="INFO")
    config["handlers"]["console"]["stream"] = "ext://sys.stdout"
    config["loggers"] = {
        "gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False},
        # The request log of api.request_log replaces gunicorn's access log.
        "gunicorn.access": {"level": "WARNING", "handlers": ["console"], "propagate": False},
    }
    return config
