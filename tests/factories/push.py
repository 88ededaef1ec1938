"""The push room's factory: a webhook endpoint created through its service (a new signing secret, the
`webhook.created` event)."""

from __future__ import annotations

from typing import Any

import factory

from ledger.actors import SYSTEM
from push.models import WebhookEndpoint
from push.services.webhooks import webhook_create


class WebhookEndpointFactory(factory.Factory):
    """Every project's events by default, to a receiver on the loopback (the tests allow private targets)."""

    class Meta:
        model = WebhookEndpoint

    url = factory.Sequence(lambda n: f"http://127.0.0.1:9/hook/{n}")
    project = None
    event_types: Any = ()

    @classmethod
    def _create(cls, model_class: type[WebhookEndpoint], *args: Any, **kwargs: Any) -> WebhookEndpoint:
        endpoint, _ = webhook_create(actor=SYSTEM, **kwargs)
        return endpoint
