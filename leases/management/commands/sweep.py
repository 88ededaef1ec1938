from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from leases.services import sweep_expired


class Command(BaseCommand):
    help = "Expire every active attempt whose lease has lapsed, in batches (the job the scheduler runs every minute)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=None, help="attempts per transaction (default: 500; 100 on SQLite)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch_size = options["batch_size"]
        report = sweep_expired(batch_size=max(1, batch_size) if batch_size is not None else None)
        self.stdout.write(
            f"Expired {report.expired} attempt(s) in {report.batches} batch(es); "
            f"worst batch {report.worst_batch_seconds * 1000:.1f} ms."
        )
