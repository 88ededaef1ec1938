"""Webhooks (SPEC §18): endpoints (added, rolled, enabled and disabled through services) and the deliveries log.

A signing secret exists in exactly one HTTP response: the `no-store` page
rendered by the POST that added the endpoint or rolled its secret (like an
agent's token, `console.fleet.agents.token_page`), with a copy button. It is
never put in a message (Django's cookie storage is readable without the
server key), a session, a log entry or an event (issue 32). Rolling is
confirmed first; every lever (roll, disable, enable, send test, drop the
backlog, redeliver) writes a LogEntry. Deliveries are an audit log: read-only,
with a redeliver action, and a list that is never counted in full
(`EstimatedCountMixin`).

Each endpoint's row and page show its backlog (open deliveries, the oldest,
the last delivery, the lag), read for the whole page in one grouped query
(`push.selectors.endpoint_backlogs`, called by `EndpointChangeList`).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import (
    EMPTY,
    EstimatedCountMixin,
    ReadOnlyAdmin,
    ServiceFormAdmin,
    ServiceModelForm,
    actor_of,
    badge,
    duration,
    moment,
    plural,
)
from console.confirm import Confirmation, is_confirmed, render_confirmation
from core.errors import LedgerError
from ledger import clock
from ledger.models import EventType
from push.models import WebhookDelivery, WebhookEndpoint
from push.selectors import Backlog, endpoint_backlogs
from push.services.webhooks import (
    delivery_redeliver,
    webhook_backlog_drop,
    webhook_create,
    webhook_roll_secret,
    webhook_send_test,
    webhook_set_active,
)


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


def secret_page(
    request: HttpRequest,
    model_admin: admin.ModelAdmin,
    *,
    title: str,
    issued: list[tuple[WebhookEndpoint, str]],
    rolled: bool,
) -> TemplateResponse:
    """The one response that ever carries these secrets: never cached, never a cookie or a message."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.opts,
        "issued": [(endpoint, secret, f"lh-secret-{endpoint.pk}") for endpoint, secret in issued],
        "rolled": rolled,
    }
    response = TemplateResponse(request, "admin/push/webhookendpoint/secret_once.html", context)
    response["Cache-Control"] = "no-store, max-age=0"
    response["Pragma"] = "no-cache"
    return response


class EndpointChangeList(ChangeList):
    """The endpoints' list: the page's backlogs read in one grouped query, put on each row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        backlogs = endpoint_backlogs(self.result_list, now=clock.now())
        for endpoint in self.result_list:
            endpoint._backlog = backlogs[endpoint.pk]


def backlog_of(endpoint: WebhookEndpoint) -> Backlog:
    """The row's backlog read with its page, or (on the endpoint's own page) read now."""
    backlog: Backlog | None = getattr(endpoint, "_backlog", None)
    if backlog is None:
        backlog = endpoint._backlog = endpoint_backlogs([endpoint], now=clock.now())[endpoint.pk]  # type: ignore[attr-defined]
    return backlog


class WebhookEndpointAdmin(ServiceFormAdmin):
    form = WebhookEndpointForm
    list_display = [
        "id",
        "url",
        "project",
        "types",
        "min_severity",
        "format",
        "state",
        "consecutive_failures",
        "pending",
        "oldest_pending",
        "last_delivered",
        "lag",
    ]
    list_filter = ["is_active", "format", "min_severity"]
    search_fields = ["url"]
    ordering = ["id"]
    actions = ["send_test", "roll_secret", "disable", "enable", "drop_backlog"]
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
        "pending",
        "oldest_pending",
        "last_delivered",
        "lag",
        "disabled_at",
        "previous_secret_expires_at",
        "created_at",
        "deliveries_link",
    ]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return EndpointChangeList

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

    def construct_change_message(self, request: HttpRequest, form: Any, formsets: Any, add: bool = False) -> Any:
        if add:
            return "Added the endpoint; its signing secret was shown once."
        return super().construct_change_message(request, form, formsets, add)

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> HttpResponse:
        secret = getattr(request, "_leasehold_webhook_secret", None)
        if not secret:
            return super().response_add(request, obj, post_url_continue)
        return secret_page(request, self, title=f"Webhook #{obj.pk} added", issued=[(obj, secret)], rolled=False)

    @admin.display(description="event types")
    def types(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.event_types) or "all"

    @admin.display(description="state", ordering="is_active")
    def state(self, endpoint: WebhookEndpoint) -> SafeString:
        return badge("available", "active") if endpoint.is_active else badge("cancelled", "disabled")

    @admin.display(description="pending")
    def pending(self, endpoint: WebhookEndpoint) -> SafeString:
        """Open deliveries: pending, or failed and waiting for their next try."""
        count = backlog_of(endpoint).pending
        url = reverse("admin:push_webhookdelivery_changelist") + f"?endpoint__id__exact={endpoint.pk}"
        return format_html('<a href="{}" class="lh-backlog">{}</a>', url, count)

    @admin.display(description="oldest pending")
    def oldest_pending(self, endpoint: WebhookEndpoint) -> str:
        return moment(backlog_of(endpoint).oldest_pending_at)

    @admin.display(description="last delivered", ordering="last_delivered_at")
    def last_delivered(self, endpoint: WebhookEndpoint) -> str:
        return moment(backlog_of(endpoint).last_delivered_at)

    @admin.display(description="lag")
    def lag(self, endpoint: WebhookEndpoint) -> str:
        """How far behind: the age of the oldest open delivery."""
        lag = backlog_of(endpoint).lag
        return duration(lag.total_seconds()) if lag is not None else EMPTY

    @admin.display(description="deliveries")
    def deliveries_link(self, endpoint: WebhookEndpoint) -> SafeString:
        url = reverse("admin:push_webhookdelivery_changelist") + f"?endpoint__id__exact={endpoint.pk}"
        return format_html('<a href="{}">Deliveries of #{}</a>', url, endpoint.pk)

    @admin.action(description="Roll the signing secret…", permissions=["operate"])
    def roll_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> HttpResponse | None:
        endpoints = list(queryset.order_by("pk"))
        form = forms.Form(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            actor = actor_of(request)
            issued = []
            for endpoint in endpoints:
                rolled, secret = webhook_roll_secret(endpoint=endpoint, actor=actor)
                self.log_change(request, rolled, "Rolled the signing secret; the new one was shown once.")
                issued.append((rolled, secret))
            return secret_page(
                request, self, title=f"Rolled {plural(len(issued), 'signing secret')}", issued=issued, rolled=True
            )
        confirmation = Confirmation(
            title=f"Roll the signing secret of {plural(len(endpoints), 'webhook')}",
            intro="Each selected endpoint gets a new signing secret, shown once on the next page. "
            "The current secret keeps signing alongside for 24 hours (a second v1= signature), "
            "so receivers have that long to switch to the new one.",
            submit_label="Yes, roll",
            columns=["Webhook", "URL", "Project", "State"],
            rows=[(e, [f"#{e.pk}", e.url, e.project.slug if e.project else "all", self.state(e)]) for e in endpoints],
            danger=False,
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name="roll_secret",
            objects=endpoints,
            cancel_url=reverse("admin:push_webhookendpoint_changelist"),
        )

    @admin.action(description="Disable", permissions=["operate"])
    def disable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=False)

    @admin.action(description="Enable (clears the failure streak)", permissions=["operate"])
    def enable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=True)

    @admin.action(description="Send a test delivery", permissions=["operate"])
    def send_test(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        """One `webhook.test` delivery per selected endpoint, posted by the next delivery run."""
        actor = actor_of(request)
        queued, skipped = 0, []
        for endpoint in queryset.order_by("pk"):
            delivery = webhook_send_test(endpoint=endpoint, actor=actor)
            self.log_change(request, endpoint, f"Queued a test delivery (#{delivery.pk}).")
            queued += 1
            if not endpoint.is_active:
                skipped.append(f"Webhook #{endpoint.pk} is disabled: its test waits until it is enabled.")
        self.report(request, done=f"Queued {plural(queued, 'test delivery', 'test deliveries')}.", skipped=skipped)

    @admin.action(description="Drop the backlog of disabled endpoints (mark dead)…", permissions=["operate"])
    def drop_backlog(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> HttpResponse | None:
        """Mark a disabled endpoint's open deliveries dead (rows kept): confirmed first, then audited."""
        endpoints = list(queryset.order_by("pk"))
        disabled = [e for e in endpoints if not e.is_active]
        skipped = [f"Webhook #{e.pk} is active: disable it first." for e in endpoints if e.is_active]
        form = forms.Form(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            actor = actor_of(request)
            total, refused = 0, []
            for endpoint in disabled:
                try:
                    dropped = webhook_backlog_drop(endpoint=endpoint, actor=actor)
                except LedgerError as error:
                    refused.append(str(error))
                    continue
                if dropped:
                    self.log_change(
                        request,
                        endpoint,
                        f"Dropped the backlog: {plural(dropped, 'delivery', 'deliveries')} marked dead.",
                    )
                total += dropped
            self.report(
                request,
                done=f"Marked {plural(total, 'delivery', 'deliveries')} dead.",
                skipped=skipped,
                refused=refused,
            )
            return None
        if not disabled:
            self.report(request, done=None, skipped=skipped)
            return None
        backlogs = endpoint_backlogs(disabled, now=clock.now())
        confirmation = Confirmation(
            title=f"Drop the backlog of {plural(len(disabled), 'disabled webhook')}",
            intro="Every open delivery (pending, or failed and waiting to retry) of each endpoint below is "
            "marked dead: it will not be posted when the endpoint is enabled again. The deliveries stay "
            "in the list, and Redeliver can queue any of them again.",
            submit_label="Yes, mark them dead",
            columns=["Webhook", "URL", "Pending", "Oldest pending"],
            rows=[
                (
                    e,
                    [
                        f"#{e.pk}",
                        e.url,
                        str(backlogs[e.pk].pending),
                        moment(backlogs[e.pk].oldest_pending_at),
                    ],
                )
                for e in disabled
            ],
            notes=skipped,
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name="drop_backlog",
            objects=disabled,
            cancel_url=reverse("admin:push_webhookendpoint_changelist"),
        )

    def _set_active(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint], *, active: bool) -> None:
        actor = actor_of(request)
        changed = [e for e in queryset if webhook_set_active(endpoint=e, active=active, actor=actor)]
        for endpoint in changed:
            self.log_change(
                request,
                endpoint,
                "Enabled the endpoint (failure streak cleared)." if active else "Disabled the endpoint.",
            )
        self.report(request, done=f"{'Enabled' if active else 'Disabled'} {plural(len(changed), 'webhook')}.")


class WebhookDeliveryAdmin(EstimatedCountMixin, ReadOnlyAdmin):
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
        deliveries = list(queryset)
        count = delivery_redeliver(deliveries=deliveries, actor=actor_of(request))
        for delivery in deliveries:
            self.log_change(request, delivery, "Redelivered: queued to post again, tries counted anew.")
        self.report(request, done=f"Queued {plural(count, 'delivery', 'deliveries')} again.")
