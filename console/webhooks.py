"""Webhooks (SPEC §18): endpoints (added, rolled, enabled and disabled through services) and the deliveries log.

The signing secret is shown once — in the message after adding an endpoint
or rolling its secret — and never on any page, list or export after that.
Deliveries are an audit log: read-only, with a redeliver action.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import ReadOnlyAdmin, ServiceFormAdmin, ServiceModelForm, actor_of, badge, plural
from ledger.models import EventType
from push.models import WebhookDelivery, WebhookEndpoint
from push.services.webhooks import delivery_redeliver, webhook_create, webhook_roll_secret, webhook_set_active


class WebhookEndpointForm(ServiceModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", help_text="http:// or https://, reachable from here.")
    event_types = forms.MultipleChoiceField(
        choices=EventType.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Leave all unticked for every event type.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["url", "project", "event_types", "min_severity", "format"]


class WebhookEndpointAdmin(ServiceFormAdmin):
    form = WebhookEndpointForm
    list_display = ["id", "url", "project", "types", "min_severity", "format", "state", "consecutive_failures"]
    list_filter = ["is_active", "format", "min_severity"]
    search_fields = ["url"]
    ordering = ["id"]
    actions = ["roll_secret", "disable", "enable"]
    add_fields = ["url", "project", "event_types", "min_severity", "format"]
    # Never the secret.
    view_fields = [
        "url",
        "project",
        "types",
        "min_severity",
        "format",
        "state",
        "consecutive_failures",
        "disabled_at",
        "previous_secret_expires_at",
        "created_at",
        "deliveries_link",
    ]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.add_fields if obj is None else self.view_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.view_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_operate_permission(request)

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> WebhookEndpoint:
        data = form.cleaned_data
        endpoint, secret = webhook_create(
            url=data["url"],
            project=data.get("project"),
            event_types=data.get("event_types") or [],
            min_severity=data["min_severity"],
            format=data["format"],
            actor=actor_of(request),
        )
        request._leasehold_webhook_secret = secret  # type: ignore[attr-defined]
        return endpoint

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> HttpResponse:
        secret = getattr(request, "_leasehold_webhook_secret", None)
        if secret:
            self.message_user(
                request,
                f"Signing secret of webhook #{obj.pk}, shown this once — keep it now: {secret}",
                messages.WARNING,
            )
        return super().response_add(request, obj, post_url_continue)

    @admin.display(description="event types")
    def types(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.event_types) or "all"

    @admin.display(description="state", ordering="is_active")
    def state(self, endpoint: WebhookEndpoint) -> SafeString:
        return badge("available", "active") if endpoint.is_active else badge("cancelled", "disabled")

    @admin.display(description="deliveries")
    def deliveries_link(self, endpoint: WebhookEndpoint) -> SafeString:
        url = reverse("admin:push_webhookdelivery_changelist") + f"?endpoint__id__exact={endpoint.pk}"
        return format_html('<a href="{}">Deliveries of #{}</a>', url, endpoint.pk)

    @admin.action(description="Roll the signing secret (the old one signs along for 24 h)", permissions=["operate"])
    def roll_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            _, secret = webhook_roll_secret(endpoint=endpoint, actor=actor_of(request))
            self.message_user(
                request, f"New signing secret of webhook #{endpoint.pk}, shown this once: {secret}", messages.WARNING
            )

    @admin.action(description="Disable", permissions=["operate"])
    def disable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=False)

    @admin.action(description="Enable (clears the failure streak)", permissions=["operate"])
    def enable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=True)

    def _set_active(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint], *, active: bool) -> None:
        actor = actor_of(request)
        changed = [e for e in queryset if webhook_set_active(endpoint=e, active=active, actor=actor)]
        self.report(request, done=f"{'Enabled' if active else 'Disabled'} {plural(len(changed), 'webhook')}.")


class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "event_link", "endpoint", "status_badge", "attempts", "last_status_code", "next_attempt_at"]
    list_filter = ["status", "endpoint"]
    list_select_related = ["event", "endpoint"]
    ordering = ["-id"]
    actions = ["redeliver"]
    readonly_fields = (
        "endpoint",
        "event_link",
        "status_badge",
        "attempts",
        "next_attempt_at",
        "last_attempt_at",
        "last_status_code",
        "last_error",
        "delivered_at",
        "created_at",
        "event_json",
    )
    fields = readonly_fields

    @admin.display(description="status", ordering="status")
    def status_badge(self, delivery: WebhookDelivery) -> SafeString:
        colors = {"delivered": "completed", "pending": "active", "failed": "warn", "dead": "error"}
        return badge(colors.get(delivery.status, delivery.status), delivery.get_status_display())

    @admin.display(description="event", ordering="event_id")
    def event_link(self, delivery: WebhookDelivery) -> SafeString:
        url = reverse("admin:ledger_event_change", args=[delivery.event_id])
        return format_html('<a href="{}">#{} {}</a>', url, delivery.event_id, delivery.event.type)

    @admin.display(description="event payload")
    def event_json(self, delivery: WebhookDelivery) -> SafeString:
        return format_html(
            '<pre class="lh-mono">{}</pre>', json.dumps(delivery.event.payload, indent=2, sort_keys=True)
        )

    @admin.action(description="Redeliver (post again, tries counted anew)", permissions=["operate"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = delivery_redeliver(deliveries=list(queryset), actor=actor_of(request))
        self.report(request, done=f"Queued {plural(count, 'delivery', 'deliveries')} again.")
