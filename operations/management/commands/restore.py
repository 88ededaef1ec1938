from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from operations.backup import BackupRefused, restore_sqlite


class Command(BaseCommand):
    help = (
        "Restore a SQLite backup into an empty data directory (default: LEASEHOLD_DATA_DIR), after checking it. "
        "PostgreSQL: use pg_restore (docs/operations.md)."
    )
    requires_system_checks: list[str] = []  # the database it would check does not exist yet

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("src")
        parser.add_argument("--data-dir", help="The empty directory to restore into; default: LEASEHOLD_DATA_DIR.")

    def handle(self, *args: Any, **options: Any) -> None:
        database = settings.DATABASES["default"]
        if database["ENGINE"] != "django.db.backends.sqlite3" and not options["data_dir"]:
            raise CommandError("restore is for SQLite; with DATABASE_URL set, restore with pg_restore.")
        data_dir = Path(options["data_dir"] or Path(database["NAME"]).parent).absolute()
        try:
            target = restore_sqlite(source=Path(options["src"]).absolute(), data_dir=data_dir)
        except BackupRefused as exc:
            raise CommandError(f"Restore refused: {exc}") from None
        self.stdout.write(f"Restored {options['src']} to {target}; run `manage.py migrate` if the backup is older.")
