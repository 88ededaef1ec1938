"""gunicorn settings module for `manage.py serve` with LEASEHOLD_LOG_FORMAT=json: its own lines as JSON too."""

from __future__ import annotations

from config.logs import gunicorn_logging

logconfig_dict = gunicorn_logging()
