from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from operations.transfer.archive import events_restore, is_archive_header
from operations.transfer.importing import project_import
from operations.transfer.untrusted import read_lines


class Command(BaseCommand):
    help = (
        "Import a project export (JSON Lines) as a new project, all or nothing (SPEC §17); or restore an event "
        "archive written by archive_events (its events with their own ids, SPEC §25)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument("--as", dest="slug", help="Slug of the new project; default: the exported one.")
        parser.add_argument(
            "--key-prefix", help="Task key prefix of the new project (keys are renamed); default: the exported one."
        )
        parser.add_argument("--dry-run", action="store_true", help="Check everything, then write nothing.")
        parser.add_argument(
            "--allow-repository",
            action="store_true",
            help="Accept a project repository or remote that is a path on this machine (or file://): "
            "reconciliation reads it with the server's permissions.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            with path.open("rb") as stream:
                if is_archive_header(stream.readline(4096).decode("utf-8", "replace")):
                    stream.seek(0)
                    restored = events_restore(lines=read_lines(stream))
                    self.stdout.write(f"Restored {restored} archived events with their own ids.")
                    return
                stream.seek(0)
                result = project_import(
                    lines=read_lines(stream),
                    slug=options["slug"],
                    key_prefix=options["key_prefix"],
                    dry_run=options["dry_run"],
                    allow_repository=options["allow_repository"],
                )
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        total = sum(result.counts.values())
        done = "Checked (dry run, nothing written)" if result.dry_run else "Imported"
        self.stdout.write(f"{done}: project {result.slug} (task keys {result.key_prefix}-N), {total} rows.")
