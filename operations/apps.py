from __future__ import annotations

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from operations.schedules import ensure_schedules

        post_migrate.connect(ensure_schedules, sender=self, dispatch_uid="operations.ensure_schedules")
