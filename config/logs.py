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


def logging_config(*, json_lines: bool, level: str) -> dict[str, Any]:
    """Django's LOGGING (and, with `gunicorn_loggers`, gunicorn's own) for the chosen format."""
    formatter = {"()": "config.logs.JsonFormatter"} if json_lines else {"format": "%(levelname)s %(name)s %(message)s"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"leasehold": formatter},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "leasehold"}},
        "root": {"handlers": ["console"], "level": level},
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
