from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from runners.models import Runner
from runners.services import runner_rotate_token


class Command(BaseCommand):
    help = "Replace a runner's token (the old one stops working). Prints the new one once, on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        runner = Runner.objects.filter(name=options["name"]).first()
        if runner is None:
            raise CommandError(f"No such runner: {options['name']}")
        try:
            runner, token = runner_rotate_token(runner=runner, actor=SYSTEM)
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(f"Rotated the token of runner {runner.name}; the old one is refused from now on.")
        self.stdout.write("Its runner token follows. It is shown once and not stored; keep it now.")
        self.stdout.write(token)
