"""`manage.py set_landing SLUG …`: a project's landing settings (SPEC §21.1); unnamed settings are kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from landing.selectors import landing_settings
from landing.services import LandingSettings, project_set_landing
from ledger.actors import SYSTEM
from ledger.models import LandMethod, Project


class Command(BaseCommand):
    help = (
        "Turn landing on for a project and set how delivered work lands (target branch, method, check, "
        "batches); --off turns it off. Settings not named keep their value."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--target", help="Target branch (default: the project's default branch).")
        parser.add_argument("--method", choices=LandMethod.values, help="merge (default), squash, rebase or none.")
        parser.add_argument("--check", help="Shell command run in the candidate tree, e.g. 'make test'; '' for none.")
        parser.add_argument("--check-timeout", type=int, help="Seconds the check may run (default 1800).")
        parser.add_argument("--approvals", type=int, help="Approved reviews a task needs to land (0: none).")
        parser.add_argument(
            "--required-check", action="append", default=None, help="A check that must pass (repeat; SPEC §22)."
        )
        parser.add_argument("--batch-max", type=int, help="Delivered tasks landed at once (default 1).")
        parser.add_argument("--max-failed-landings", type=int, help="Failed landings in a row before quarantine.")
        parser.add_argument("--off", action="store_true", help="Turn landing off: finish `done` is done again.")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["slug"]).first()
        if project is None:
            raise CommandError(f"NOT_FOUND: no project {options['slug']!r}.")
        current = LandingSettings.of(project)
        if options["off"]:
            named = [name for name in ("target", "method", "check", "batch_max") if options[name] is not None]
            if named:
                raise CommandError(f"VALIDATION_ERROR: --off takes no other setting (got {', '.join(named)}).")
            wanted = replace(current, target_branch="")
        else:
            changes: dict[str, Any] = {
                "target_branch": options["target"] or current.target_branch or project.default_branch,
            }
            for option, name in (
                ("method", "land_method"),
                ("check", "check_command"),
                ("check_timeout", "check_timeout_seconds"),
                ("approvals", "required_approvals"),
                ("required_check", "required_checks"),
                ("batch_max", "batch_max"),
                ("max_failed_landings", "max_failed_landings"),
            ):
                if options[option] is not None:
                    changes[name] = options[option]
            wanted = replace(current, **changes)
        try:
            changed = project_set_landing(project=project, settings=wanted, actor=SYSTEM)
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        settings = landing_settings(project)
        state = (
            f"on: {settings['land_method']} onto {settings['target_branch']}, batches of {settings['batch_max']}"
            + (f", check `{settings['check_command']}`" if settings["check_command"] else ", no check")
            if settings["on"]
            else "off"
        )
        verb = "Changed " + ", ".join(sorted(changed)) if changed else "Nothing changed"
        self.stdout.write(f"{verb}. Landing of {project.slug} is {state}.")
