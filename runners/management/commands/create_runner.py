from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from ledger.models import Project
from runners.services import runner_create


class Command(BaseCommand):
    help = (
        "Register a runner (SPEC §23.1): one agent per slot (NAME.1 … NAME.N). "
        "Prints the runner token once, alone on the last line of the output."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--project", action="append", default=[], dest="projects", help="Project slug it serves; repeatable."
        )
        parser.add_argument("--slots", type=int, required=True, help="How many slots (agents) it runs at once.")
        parser.add_argument("--labels", default="", help="Comma-separated labels (`gpu,postgres`).")
        parser.add_argument(
            "--landing-slots-note",
            action="store_true",
            help="Also print how to make some of its slots landers (runner.toml's landing_slots).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs: list[str] = options["projects"]
        if not slugs:
            raise CommandError("Name at least one --project.")
        projects = list(Project.objects.filter(slug__in=slugs))
        missing = sorted(set(slugs) - {p.slug for p in projects})
        if missing:
            raise CommandError(f"No such project: {', '.join(missing)}")
        labels = [label.strip() for label in options["labels"].split(",") if label.strip()]
        try:
            runner, token = runner_create(
                name=options["name"], projects=projects, slots=options["slots"], labels=labels, actor=SYSTEM
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(
            f"Created runner {runner.name} with {runner.slots} slots "
            f"({runner.name}.1 … {runner.name}.{runner.slots}) for: {', '.join(sorted(slugs))}; "
            f"labels: {', '.join(runner.labels) or 'none'}."
        )
        if options["landing_slots_note"]:
            self.stdout.write("Landing slots: set landing_slots = N in the project's table of its runner.toml.")
        self.stdout.write("Its runner token follows. It is shown once and not stored; keep it now.")
        self.stdout.write(token)
