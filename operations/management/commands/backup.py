from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from operations.backup import BackupRefused, backup_default_database


class Command(BaseCommand):
    help = (
        "Back up the whole database while it serves: SQLite with the online backup API (then PRAGMA integrity_check), "
        "PostgreSQL with pg_dump --format=custom (then pg_restore --list). DEST must not exist."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dest")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            made = backup_default_database(dest=Path(options["dest"]).absolute())
        except BackupRefused as exc:
            raise CommandError(f"Backup refused: {exc}") from None
        self.stdout.write(
            f"Backed up the {connection.vendor} database to {made} ({made.stat().st_size} bytes), checked."
        )
