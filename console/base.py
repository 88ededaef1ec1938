"""Building blocks every Leasehold ModelAdmin uses, and the cells the area modules share.

- Nothing is deletable (SPEC §1.6): `has_delete_permission` is always False.
- Nothing is edited through a bare ModelForm: change pages are read-only and
  every write is an action or an add form that calls a service with
  `Actor(user=request.user)`.
- Actions are gated by `has_operate_permission` (the model's `change_`
  permission: `Ledger admins` and superusers) and `has_export_permission`
  (the model's `view_` permission, which `Managers` hold).
- A `LedgerError` raised by a service while saving an add form is shown on the
  re-rendered form instead of a server error (`ServiceFormAdmin`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from core.errors import LedgerError
from ledger.actors import Actor

EMPTY = "—"


def actor_of(request: HttpRequest) -> Actor:
    """The admin user as the actor of a service call (events and `revoked_by` name them)."""
    return Actor(user=request.user)


def badge(value: str | None, label: str | None = None) -> SafeString:
    """A colored status pill; its color comes from `lh-<value>` in `admin/base_site.html`."""
    if not value:
        return format_html('<span class="lh-muted">{}</span>', EMPTY)
    return format_html('<span class="lh-badge lh-{}">{}</span>', value.replace(".", "-"), label or value)


def duration(seconds: float) -> str:
    """`4m 10s`, `2h 05m`, `3d 4h`: compact enough for a table cell."""
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{sign}{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d {hours}h"


def moment(value: datetime | None) -> str:
    """A timestamp for a table cell: UTC, to the second."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else EMPTY


def task_link(task_id: int, key: str) -> SafeString:
    """The task's key, linking to its page."""
    return format_html('<a href="{}">{}</a>', reverse("admin:ledger_task_change", args=[task_id]), key)


# A holder renews every third of its lease (SPEC §3): under half left, it missed a renewal; under a quarter, two.
LEASE_SOON_FRACTION = 0.5
LEASE_URGENT_FRACTION = 0.25


def lease_level(left_seconds: float, lease_seconds: int | None) -> str:
    """`lh-ok`, `lh-soon` or `lh-urgent`, by the share of its own lease that is left.

    Relative, so a healthy 60 s lease is not red for ever (issue 32). Without the lease's length
    (a caller that does not know it), the absolute thresholds: under a minute, under ten.
    """
    if lease_seconds:
        share = left_seconds / lease_seconds
        return "lh-urgent" if share < LEASE_URGENT_FRACTION else "lh-soon" if share < LEASE_SOON_FRACTION else "lh-ok"
    return "lh-urgent" if left_seconds < 60 else "lh-soon" if left_seconds < 600 else "lh-ok"


def lease_remaining(expires_at: datetime | None, now: datetime, lease_seconds: int | None = None) -> SafeString:
    """Time left on a live lease, coloured by the share of the lease left (`lease_level`)."""
    if expires_at is None:
        return format_html('<span class="lh-muted">{}</span>', EMPTY)
    left = (expires_at - now).total_seconds()
    level = lease_level(left, lease_seconds)
    return format_html(
        '<span class="lh-remaining {}" title="{}">{}</span>', level, expires_at.isoformat(), duration(left)
    )


def task_lease_left(task: Any, now: datetime) -> SafeString:
    """Lease-left of a task annotated with its live lease (`lease_expires_at`, `holder_lease_seconds`)."""
    return lease_remaining(getattr(task, "lease_expires_at", None), now, getattr(task, "holder_lease_seconds", None))


class EstimatedCountPaginator(Paginator):
    """A paginator that never runs `COUNT(*)`.

    It looks ahead from the requested page by at most `lookahead_pages` pages
    of primary keys (one bounded index scan) and reports `offset + what it
    found` as the count. Near the end of the data the count is exact; before
    that it says "at least this many", enough to draw the next few page links.
    `is_estimate` tells the template which of the two it is.
    """

    lookahead_pages = 5

    def __init__(self, object_list: QuerySet[Any], per_page: int, *, page_number: int = 1, **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.page_number = max(1, page_number)

    @cached_property
    def count(self) -> int:
        offset = (self.page_number - 1) * self.per_page
        window = self.per_page * self.lookahead_pages + 1
        queryset = cast(QuerySet[Any], self.object_list)
        found = len(queryset.values_list("pk", flat=True)[offset : offset + window])
        self.is_estimate = found == window
        return offset + found

    is_estimate = False


def page_number_of(request: HttpRequest) -> int:
    try:
        return int(request.GET.get("p", 1))
    except ValueError:
        return 1


class EstimatedCountMixin:
    """A list on a table that grows without bound: never counted (see `EstimatedCountPaginator`)."""

    show_full_result_count = False

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> EstimatedCountPaginator:
        return EstimatedCountPaginator(
            queryset,
            per_page,
            page_number=page_number_of(request),
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )


class LeaseholdModelAdmin(admin.ModelAdmin):
    """No deletion, read-only change pages, service-backed actions."""

    list_per_page = 50
    empty_value_display = EMPTY
    # Facet counts run one COUNT per filter choice; never on ledger tables.
    show_facets = admin.ShowFacets.NEVER

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Change pages are views; changes are actions and add forms that call services.
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """May run this model's actions: the `change_` permission (Ledger admins, superusers)."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def has_export_permission(self, request: HttpRequest) -> bool:
        """May export CSV: anyone who may view (Managers included)."""
        return self.has_view_permission(request)

    def report(
        self,
        request: HttpRequest,
        *,
        done: str | None,
        skipped: Sequence[str] = (),
        refused: Sequence[str] = (),
    ) -> None:
        """Tell the user what an action did, in counts, and why anything was left alone."""
        if done:
            self.message_user(request, done, messages.SUCCESS)
        for line in _capped(skipped):
            self.message_user(request, line, messages.INFO)
        for line in _capped(refused):
            self.message_user(request, line, messages.ERROR)


def _capped(lines: Sequence[str], limit: int = 5) -> Iterable[str]:
    yield from lines[:limit]
    if len(lines) > limit:
        yield f"… and {len(lines) - limit} more."


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"


class ReadOnlyAdmin(LeaseholdModelAdmin):
    """An audit view: nobody adds, changes or deletes."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    empty_value_display = EMPTY
    max_num = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class _ServiceRefused(Exception):
    def __init__(self, error: LedgerError) -> None:
        super().__init__(error.message)
        self.error = error


class ServiceModelForm(forms.ModelForm):
    """A model form whose row is validated by the service it is saved through, not by the form.

    The database constraints are the service's to report: checked here they
    would surface as `Constraint "…" is violated.` before the service could
    say what is wrong (the service's refusal is placed on the field instead).
    Field-level validation (types, lengths, choices) still runs here.
    """

    def _post_clean(self) -> None:
        self.instance.validate_constraints = lambda exclude=None: None
        try:
            super()._post_clean()  # type: ignore[misc]
        finally:
            del self.instance.validate_constraints


class ServiceFormAdmin(LeaseholdModelAdmin):
    """Add (and, where a model allows it, change) forms whose save calls a service.

    When the service refuses (a `LedgerError`), the admin's transaction rolls
    back and the same POST is rendered again with the refusal as a form error,
    so the user keeps their input and reads why: on the field it names, with
    the service's own message.
    """

    form = ServiceModelForm

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> Model:
        raise NotImplementedError

    def update_through_service(self, request: HttpRequest, obj: Any, form: BaseForm) -> Model:
        raise RuntimeError("Leasehold change pages are read-only; use the actions.")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            if change:
                created = self.update_through_service(request, type(obj).objects.get(pk=obj.pk), form)
            else:
                created = self.create_through_service(request, form)
        except LedgerError as exc:
            raise _ServiceRefused(exc) from exc
        # The admin goes on with `obj` (log entry, redirect): make it the created row.
        obj.__dict__.update({k: v for k, v in created.__dict__.items() if k != "_state"})
        obj._state.adding = False
        obj._state.db = created._state.db

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """The service saved the relations it owns; the form saves nothing itself."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _ServiceRefused as refused:
            request._leasehold_refusal = refused.error  # type: ignore[attr-defined]
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form_class = super().get_form(request, obj, change, **kwargs)
        found: LedgerError | None = getattr(request, "_leasehold_refusal", None)
        if found is None:
            return form_class
        refusal: LedgerError = found

        class RefusedForm(form_class):  # type: ignore[valid-type,misc]
            def clean(self) -> dict[str, Any]:
                cleaned: dict[str, Any] = super().clean()
                fields = refusal.details.get("fields") if isinstance(refusal.details, dict) else None
                named = [name for name in (fields or {}) if name in self.fields and name not in self.errors]
                for name in named:
                    # One field named: the service's message says it best. Several: each its own detail.
                    errors = (fields or {})[name]
                    detail = "; ".join(map(str, errors)) if isinstance(errors, list) else str(errors)
                    self.add_error(name, refusal.message if len(named) == 1 else f"{detail} ({refusal.message})")
                if not named:
                    self.add_error(None, refusal.message)
                return cleaned

        return RefusedForm


class ConfirmationForm(forms.Form):
    """The common part of a confirmation page: a reason that is recorded."""

    reason = forms.CharField(
        label="Reason",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "placeholder": "Why? This is recorded in the audit log."}),
        max_length=2000,
        error_messages={"required": "Give a reason: it is recorded on the attempt and in the audit log."},
    )


class DefaultedListFilter(admin.SimpleListFilter):
    """A list filter with a choice that applies while its parameter is absent (Django's own apply none).

    `default` is that choice's value (`default_for` may pick it per request). With `default_display`
    set, the default is a choice of its own, listed first and linking to the list without the
    parameter (the task list's active work, the reservations' live ones); without it, the default
    is one of `lookups` and its link names it (the findings' and incidents' open ones).
    `queryset` reads `self.value()`, which is never empty.
    """

    default: str = ""
    default_display: str | None = None

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        self.default = self.default_for(request)
        super().__init__(request, params, model, model_admin)

    def default_for(self, request: HttpRequest) -> str:
        return type(self).default

    def value(self) -> str:
        return super().value() or self.default

    def choices(self, changelist: Any) -> Any:
        if self.default_display is not None:
            yield {
                "selected": self.value() == self.default,
                "query_string": changelist.get_query_string(remove=[self.parameter_name]),
                "display": self.default_display,
            }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }
