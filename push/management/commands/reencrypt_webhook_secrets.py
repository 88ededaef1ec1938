from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from push.secret_box import SecretUnreadable
from push.services.webhooks import webhook_secrets_reencrypt


class Command(BaseCommand):
    help = (
        "Encrypt the webhook signing secrets anew with LEASEHOLD_SECRET_KEY, after a rotation: "
        "the old key can then leave LEASEHOLD_SECRET_KEY_FALLBACKS."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            count = webhook_secrets_reencrypt()
        except SecretUnreadable as exc:
            raise CommandError(f"Nothing changed: {exc}.") from None
        self.stdout.write(f"Encrypted the signing secrets of {count} webhook endpoint(s) with the current key.")
