from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from ledger.permissions import sync_group_permissions

        post_migrate.connect(sync_group_permissions, dispatch_uid="ledger.sync_group_permissions")
