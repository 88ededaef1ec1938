"""Confirmation pages for destructive admin actions (Django's `delete_selected` is the model).

The first POST from the changelist (or a GET on a per-object URL) renders a
page listing what will be affected and a form; submitting that page posts the
same action again with `post=yes`. Only a valid form lets the action run:
revoking needs a reason and the tick "I have confirmed the agent process is
gone"; reassigning also needs the agent to reserve the task for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse

from console.base import ConfirmationForm
from ledger.models import Agent

PROCESS_GONE_LABEL = "I have confirmed the agent process is gone"


class RevokeForm(ConfirmationForm):
    process_gone = forms.BooleanField(
        label=PROCESS_GONE_LABEL,
        error_messages={
            "required": "Tick the box once you have confirmed the agent process is gone: "
            "a live process would keep working without a lease."
        },
    )


class ReassignForm(RevokeForm):
    agent = forms.ModelChoiceField(
        label="Reserve for agent",
        queryset=Agent.objects.filter(is_active=True).order_by("handle"),
        empty_label="— choose the agent who alone may claim next —",
        error_messages={"required": "Choose the agent the task is reassigned to."},
    )

    field_order = ["agent", "reason", "process_gone"]


@dataclass(frozen=True)
class Confirmation:
    """What a confirmation page shows."""

    title: str
    intro: str
    submit_label: str
    columns: Sequence[str]
    rows: Sequence[tuple[Model, Sequence[Any]]]
    warning: str = ""
    danger: bool = True
    notes: Sequence[str] = field(default_factory=tuple)
    # Beside the tick box of a revoke: each holder's run heartbeat and last renewal, and a warning
    # when one was heard from in the last minute (`console.agent_health.revoke_liveness`).
    liveness: Sequence[str] = field(default_factory=tuple)
    liveness_warning: str = ""


def is_confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("post") == "yes"


def render_confirmation(
    request: HttpRequest,
    model_admin: admin.ModelAdmin,
    *,
    confirmation: Confirmation,
    form: forms.Form,
    action_name: str | None,
    objects: Sequence[Model],
    cancel_url: str,
) -> TemplateResponse:
    """The confirmation page. `action_name` None means the page posts to its own URL."""
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": confirmation.title,
        "subtitle": None,
        "confirmation": confirmation,
        "form": form,
        "objects": objects,
        "action_name": action_name,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "opts": opts,
        "app_label": opts.app_label,
        "cancel_url": cancel_url,
        "media": model_admin.media + form.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/leasehold/confirm_action.html", context)
