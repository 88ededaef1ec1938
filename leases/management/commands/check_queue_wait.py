from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from leases.services import check_queue_wait


class Command(BaseCommand):
    help = "Raise one task.queue_wait_exceeded event per task claimable for longer than its project allows."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"Raised {check_queue_wait()} queue-wait alert(s).")
