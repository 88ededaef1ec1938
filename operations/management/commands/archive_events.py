from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger import clock
from operations.event_archive import ArchiveRefused, events_archive

MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def _month(value: str) -> date:
    match = MONTH.match(value)
    if not match or not 1 <= int(match[2]) <= 12:
        raise CommandError(f"VALIDATION_ERROR: --before takes a month as YYYY-MM, not {value[:40]!r}.")
    return date(int(match[1]), int(match[2]), 1)


class Command(BaseCommand):
    help = (
        "Archive every closed month of events before --before (PostgreSQL): export each month partition to "
        "DEST/events-YYYY-MM.jsonl, check the file against it, then detach it (kept as "
        "ledger_event_archived_pYYYYMM). import_project reads an archive back (SPEC §25)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, help="First month NOT archived, YYYY-MM (at most this month).")
        parser.add_argument("dest", help="Directory the archive files are written to.")

    def handle(self, *args: Any, **options: Any) -> None:
        before = _month(options["before"])
        try:
            result = events_archive(before=before, dest=Path(options["dest"]), now=clock.now())
        except ArchiveRefused as exc:
            raise CommandError(str(exc)) from None
        except LedgerError as exc:  # the archive file did not read back as written
            raise CommandError(f"ARCHIVE_MISMATCH: {exc.message}") from None
        except OSError as exc:
            raise CommandError(f"ARCHIVE_DEST_MISSING: cannot write to {options['dest']}: {exc}") from None
        for month in result.archived:
            self.stdout.write(f"Archived {month.month}: {month.rows} events to {month.file} (sha256 {month.sha256}).")
        if result.already_archived:
            self.stdout.write(f"Already archived: {', '.join(result.already_archived)}.")
        if not result.archived:
            self.stdout.write(f"No month partition before {before:%Y-%m} left to archive.")
        if result.default_rows_before:
            self.stderr.write(
                f"{result.default_rows_before} events before {before:%Y-%m} are in ledger_event_default (months "
                "that never had a partition): they are not archived (docs/operations.md, 'Archiving events')."
            )
