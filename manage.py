#!/usr/bin/env python
"""Django's command-line utility for Leasehold.

After `scripts/dev`, management commands run as its server does: `scripts/dev`
leaves a marker, `<LEASEHOLD_DATA_DIR>/development`, and with it (and neither
LEASEHOLD_DEBUG nor LEASEHOLD_SECRET_KEY set) `manage.py` runs with
LEASEHOLD_DEBUG=1, on the development key kept beside the database. A setting
that stops start-up is reported on one line, not as a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEVELOPMENT_MARKER = "development"


def _development_data_dir() -> bool:
    """Whether `scripts/dev` set up the data directory this command uses (and nothing says otherwise)."""
    if "LEASEHOLD_DEBUG" in os.environ or os.environ.get("LEASEHOLD_SECRET_KEY"):
        return False
    data_dir = os.environ.get("LEASEHOLD_DATA_DIR") or str(Path(__file__).resolve().parent / "var")
    return (Path(data_dir) / DEVELOPMENT_MARKER).is_file()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
    if _development_data_dir():
        os.environ["LEASEHOLD_DEBUG"] = "1"
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        if "LEASEHOLD_" not in str(exc) and "DATABASE_URL" not in str(exc):
            raise
        print(f"manage.py: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
