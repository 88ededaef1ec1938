from __future__ import annotations

from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from leases.schedules import ensure_schedules

        post_migrate.connect(ensure_schedules, sender=self, dispatch_uid="leases.ensure_schedules")
