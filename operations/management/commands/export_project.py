from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Project
from operations.transfer.export import project_export


class Command(BaseCommand):
    help = "Write a project as JSON Lines (SPEC §17): typed rows in replayable order, no tokens or token hashes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--output", help="File to write (must not exist); default: standard output.")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["slug"]).first()
        if project is None:
            raise CommandError(f"NOT_FOUND: no project with slug {options['slug']!r}.")
        if not options["output"]:
            project_export(project=project, out=sys.stdout)
            return
        output = Path(options["output"])
        if output.exists():
            raise CommandError(f"{output} exists; choose a new file.")
        partial = output.with_name(output.name + ".partial")
        try:
            with partial.open("x", encoding="utf-8") as out:
                counts = project_export(project=project, out=out)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.rename(output)
        total = sum(counts.values())
        self.stderr.write(f"Exported {project.slug}: {total} rows to {output}.")
