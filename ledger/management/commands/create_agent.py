from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from ledger.label_sets import parse_label_list
from ledger.models import AgentKind, Project
from ledger.services import agent_create


class Command(BaseCommand):
    help = "Create an agent. Prints its API token once, alone on the last line of the output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("handle")
        parser.add_argument("--kind", required=True, choices=AgentKind.values)
        parser.add_argument(
            "--project", action="append", default=[], dest="projects", help="Project slug it may see; repeatable."
        )
        parser.add_argument(
            "--labels",
            default="",
            help="Comma-separated labels of what it can do, e.g. gpu,cuda (SPEC §23.1): it claims only tasks "
            "whose requires are all among them.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs: list[str] = options["projects"]
        projects = list(Project.objects.filter(slug__in=slugs))
        missing = sorted(set(slugs) - {p.slug for p in projects})
        if missing:
            raise CommandError(f"No such project: {', '.join(missing)}")
        try:
            agent, token = agent_create(
                handle=options["handle"],
                kind=options["kind"],
                projects=projects,
                labels=parse_label_list(options["labels"]),
                actor=SYSTEM,
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(f"Created agent {agent.handle} ({agent.kind}) for: {', '.join(slugs) or 'no projects'}.")
        if agent.labels:
            self.stdout.write(f"Its labels: {', '.join(agent.labels)}.")
        self.stdout.write("Its API token follows. It is shown once and not stored; keep it now.")
        self.stdout.write(token)
