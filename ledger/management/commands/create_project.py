from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from ledger.services import project_create


class Command(BaseCommand):
    help = "Create a project. Task keys are its key prefix (derived from the slug) plus a number."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--repository", default="", help="Local path or git URL used by reconciliation.")
        parser.add_argument(
            "--remote", default="", help="Git URL agents push to; reconciliation reads pushed branches from it."
        )
        parser.add_argument("--default-branch", default="main")
        parser.add_argument("--key-prefix", default="", help="Task key prefix; default: the slug, uppercased.")
        parser.add_argument("--default-lease-seconds", type=int, default=900)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_create(
                slug=options["slug"],
                name=options["name"],
                repository=options["repository"],
                remote=options["remote"],
                default_branch=options["default_branch"],
                key_prefix=options["key_prefix"],
                default_lease_seconds=options["default_lease_seconds"],
                actor=SYSTEM,
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(f"Created project {project.slug} (task keys {project.key_prefix}-N).")
