"""Decisions (SPEC §16.2): recorded by people or agents, superseded, never deleted.

Adding goes through `ledger.services.decision_create` (the bounds are the service's: a title of
at most 200 characters, a body of at most 4,000). "Supersede by…" marks the selected decisions
superseded by another active decision of their project, through `decision_supersede`.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.safestring import SafeString

from console.base import ConfirmationForm, ServiceFormAdmin, actor_of, badge, moment, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from core.errors import LedgerError
from ledger.models import Decision, DecisionStatus
from ledger.services import decision_create, decision_supersede


class SupersedeForm(ConfirmationForm):
    by = forms.ModelChoiceField(
        label="Superseded by",
        queryset=Decision.objects.filter(status=DecisionStatus.ACTIVE).order_by("-id"),
        empty_label="— the decision that replaces them —",
    )
    field_order = ["by", "reason"]


class DecisionAdmin(ServiceFormAdmin):
    list_display = ["id", "title", "project", "task", "status_badge", "author", "created", "superseded_by"]
    list_display_links = ["id", "title"]
    list_filter = ["project", "status"]
    search_fields = ["title", "=task__key"]
    list_select_related = ["project", "task", "author_agent", "author_user"]
    ordering = ["-id"]
    actions = ["supersede"]
    add_fields = ["project", "task", "title", "body"]
    readonly_fields = ("project", "task", "title", "body", "status_badge", "superseded_by", "author", "created")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.add_fields if obj is None else self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> Decision:
        data = form.cleaned_data
        return decision_create(
            project=data["project"],
            task=data.get("task"),
            title=data["title"],
            body=data.get("body") or "",
            actor=actor_of(request),
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, decision: Decision) -> SafeString:
        return badge("done" if decision.status == DecisionStatus.ACTIVE else "cancelled", decision.status)

    @admin.display(description="author")
    def author(self, decision: Decision) -> str:
        return decision.author_label

    @admin.display(description="recorded", ordering="created_at")
    def created(self, decision: Decision) -> str:
        return moment(decision.created_at)

    @admin.action(description="Supersede by…", permissions=["operate"])
    def supersede(self, request: HttpRequest, queryset: QuerySet[Decision]) -> HttpResponse | None:
        decisions = list(queryset.select_related("project"))
        form = SupersedeForm(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            done, refused = 0, []
            for decision in decisions:
                try:
                    decision_supersede(decision=decision, by=form.cleaned_data["by"], actor=actor_of(request))
                except LedgerError as exc:
                    refused.append(f"Decision {decision.pk}: {exc.message}")
                    continue
                done += 1
                self.log_change(request, decision, f"Superseded: {form.cleaned_data['reason'][:200]}")
            self.report(request, done=f"{plural(done, 'decision')} superseded." if done else None, refused=refused)
            return None
        confirmation = Confirmation(
            title=f"Supersede {plural(len(decisions), 'decision')}",
            intro="Mark the selected decisions superseded by the one you choose; they stay on record.",
            submit_label="Yes, supersede",
            danger=False,
            columns=["Decision", "Title", "Project", "Status"],
            rows=[(d, [d.pk, d.title, d.project.slug, d.status]) for d in decisions],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name="supersede",
            objects=decisions,
            cancel_url=reverse("admin:ledger_decision_changelist"),
        )
