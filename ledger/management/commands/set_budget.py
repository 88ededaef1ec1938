"""`manage.py set_budget --project SLUG | --agent HANDLE [--daily-tokens N] [--daily-cost-usd D]` (SPEC §19)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import LedgerError
from ledger.actors import SYSTEM
from ledger.models import Agent, Project
from ledger.services import budget_set

NO_LIMIT = "none"


def _limit(value: str | None) -> Any:
    """The option's value for `budget_set`: absent → unchanged, `none` → no limit, else as given."""
    if value is None:
        return ...
    return None if value.strip().lower() == NO_LIMIT else value


class Command(BaseCommand):
    help = (
        "Set the daily budget (per UTC day) of a project or an agent: tokens (input + output) and/or US dollars. "
        "'none' removes a limit; an option left out keeps its value. A task's own budget is set through the API "
        "or the admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        subject = parser.add_mutually_exclusive_group(required=True)
        subject.add_argument("--project", help="project slug")
        subject.add_argument("--agent", help="agent handle")
        parser.add_argument("--daily-tokens", help="tokens per UTC day, or 'none'")
        parser.add_argument("--daily-cost-usd", help="US dollars per UTC day (at most 6 decimals), or 'none'")

    def handle(self, *args: Any, **options: Any) -> None:
        tokens, cost = _limit(options["daily_tokens"]), _limit(options["daily_cost_usd"])
        if tokens is ... and cost is ...:
            raise CommandError("Give --daily-tokens and/or --daily-cost-usd.")
        subject: Project | Agent | None
        if options["project"]:
            subject = Project.objects.filter(slug=options["project"]).first()
        else:
            subject = Agent.objects.filter(handle=options["agent"]).first()
        if subject is None:
            raise CommandError(f"No such {'project' if options['project'] else 'agent'}.")
        changes: dict[str, Any] = {}
        if tokens is not ...:
            if tokens is not None and not tokens.isdigit():
                raise CommandError("--daily-tokens must be a non-negative integer or 'none'.")
            changes["daily_tokens"] = None if tokens is None else int(tokens)
        if cost is not ...:
            changes["daily_cost_usd"] = cost
        try:
            updated = budget_set(subject=subject, actor=SYSTEM, **changes)
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        tokens_shown = updated.daily_budget_tokens if updated.daily_budget_tokens is not None else "no limit"
        cost_shown = f"${updated.daily_budget_cost_usd}" if updated.daily_budget_cost_usd is not None else "no limit"
        self.stdout.write(f"Daily budget of {subject}: {tokens_shown} tokens, {cost_shown}.")
