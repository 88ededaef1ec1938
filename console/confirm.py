"""Confirmation pages for destructive admin actions (Django's `delete_selected` is the model).

The first POST from the changelist (or a GET on a per-object URL) renders a
page listing what will be affected and a form; submitting that page posts the
same action again with `post=yes`. Only a valid form lets the action run:
revoking needs a reason and the tick "I have confirmed the agent process is
gone"; reassigning also needs the agent to reserve the task for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        error_messages={
            "required": "Choose the agent the task is reassigned to.",
            "invalid_choice": "That agent cannot claim these tasks (inactive, or not in their project).",
        },
        help_text="Only active agents that may see the project of every selected task.",
    )

    field_order = ["agent", "reason", "process_gone"]


def reassign_form_for(tasks: Sequence[Model], data: Mapping[str, Any] | None) -> ReassignForm:
    """The reassign form offering only agents that could claim every one of `tasks`.

    The service refuses any other (`leases.services.task_reassign`); the form does not offer them.
    """
    form = ReassignForm(data)
    agents = Agent.objects.filter(is_active=True)
    for project_id in {getattr(task, "project_id", None) for task in tasks}:
        agents = agents.filter(pk__in=Agent.objects.filter(projects=project_id).values("pk"))
    field = form.fields["agent"]
    assert isinstance(field, forms.ModelChoiceField)
    field.queryset = agents.order_by("handle")
    return form


class CancelForm(forms.Form):
    """Cancel: with a live lease, whether to force-release it too (ticked by default) and why."""

    also_release = forms.BooleanField(
        label="Also force-release the live lease (revoke the holder's attempt now)", required=False, initial=True
    )
    reason = forms.CharField(
        label="Reason",
        required=False,
        initial="The task was cancelled.",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Recorded on the revoked attempt and in the audit log.",
    )

    # Force-release's own safeguard: a revoke asks for the tick whichever page it starts from.
    process_gone = forms.BooleanField(
        label=PROCESS_GONE_LABEL,
        required=False,
        help_text="Needed with “also force-release”: a live process would keep working without a lease.",
    )

    def __init__(self, data: Mapping[str, Any] | None = None, *, has_live_lease: bool) -> None:
        super().__init__(data)
        if not has_live_lease:
            del self.fields["also_release"]
            del self.fields["reason"]
            del self.fields["process_gone"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if cleaned.get("also_release") and not (cleaned.get("reason") or "").strip():
            self.add_error("reason", "Give a reason: it is recorded on the revoked attempt.")
        if cleaned.get("also_release") and not cleaned.get("process_gone"):
            self.add_error(
                "process_gone",
                "Tick the box once you have confirmed the agent process is gone, or untick “also force-release”.",
            )
        return cleaned


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
    # when one was heard from in the last minute (`console.fleet.agent_health.revoke_liveness`).
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
    rows = confirmation.rows
    context = {
        **model_admin.admin_site.each_context(request),
        "title": confirmation.title,
        "subtitle": None,
        "confirmation": confirmation,
        # Each cell with its column's name: on a narrow screen a row stacks into "name: value" lines.
        "labelled_rows": [(obj, list(zip(confirmation.columns, cells, strict=False))) for obj, cells in rows],
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
