from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from ledger.models import Project, Severity
from push.models import WebhookFormat
from push.services.webhooks import webhook_create


class Command(BaseCommand):
    help = "Create a webhook endpoint. Prints its signing secret once, alone on the last line of the output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("url")
        parser.add_argument("--project", help="Project slug; all projects when left out.")
        parser.add_argument("--events", default="", help="Comma-separated event types; all types when left out.")
        parser.add_argument("--min-severity", default=Severity.INFO, choices=Severity.values)
        parser.add_argument("--format", default=WebhookFormat.JSON, choices=WebhookFormat.values)

    def handle(self, *args: Any, **options: Any) -> None:
        project = None
        if options["project"]:
            project = Project.objects.filter(slug=options["project"]).first()
            if project is None:
                raise CommandError(f"No such project: {options['project']}")
        try:
            endpoint, secret = webhook_create(
                url=options["url"],
                project=project,
                event_types=options["events"].split(","),
                min_severity=options["min_severity"],
                format=options["format"],
                actor=SYSTEM,
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        types = ", ".join(endpoint.event_types) or "all event types"
        self.stdout.write(
            f"Created webhook #{endpoint.pk} → {endpoint.url} ({endpoint.format}) for "
            f"{project.slug if project else 'all projects'}: {types}, severity {endpoint.min_severity} and above."
        )
        self.stdout.write("Its signing secret follows. It is shown once; keep it now.")
        self.stdout.write(secret)
