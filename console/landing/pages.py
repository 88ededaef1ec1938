"""The landing page of a project (`/admin/landing/<slug>/`): the queue in order, the live landing, the latest
results with their notes, and the landing settings form.

Anyone who may view tasks sees the page; changing the settings needs `ledger.change_project`, goes
through `landing.services.project_set_landing` (the service `manage.py set_landing` calls) and
writes a LogEntry on the project.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from core.errors import LedgerError
from landing.selectors import landing_overview
from landing.services import LandingSettings, project_set_landing
from ledger import clock
from ledger.actors import Actor
from ledger.models import BATCH_MAX_LIMIT, LandMethod, Project


class LandingSettingsForm(forms.Form):
    target_branch = forms.CharField(
        required=False, max_length=200, help_text="Branch delivered work lands on; empty turns landing off."
    )
    land_method = forms.ChoiceField(choices=LandMethod.choices)
    check_command = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="Run in the candidate tree, e.g. make test."
    )
    check_timeout_seconds = forms.IntegerField(min_value=1, max_value=24 * 3600)
    required_approvals = forms.IntegerField(min_value=0, max_value=20)
    required_checks = forms.CharField(required=False, help_text="Check names, separated by commas (SPEC §22).")
    batch_max = forms.IntegerField(min_value=1, max_value=BATCH_MAX_LIMIT)
    max_failed_landings = forms.IntegerField(min_value=0, max_value=1000, help_text="0: never quarantine.")

    def settings(self) -> LandingSettings:
        data = self.cleaned_data
        return LandingSettings(
            target_branch=data["target_branch"].strip(),
            land_method=data["land_method"],
            check_command=data["check_command"].replace("\r\n", "\n").strip(),
            check_timeout_seconds=data["check_timeout_seconds"],
            required_approvals=data["required_approvals"],
            required_checks=[name.strip() for name in data["required_checks"].split(",") if name.strip()],
            batch_max=data["batch_max"],
            max_failed_landings=data["max_failed_landings"],
        )


def _initial(project: Project) -> dict[str, Any]:
    settings = LandingSettings.of(project)
    return {**settings.__dict__, "required_checks": ", ".join(settings.required_checks)}


def landing_page(request: HttpRequest, site: Any, slug: str) -> HttpResponse:
    if not request.user.has_perm("ledger.view_task"):
        raise PermissionDenied
    project = get_object_or_404(Project, slug=slug)
    may_change = request.user.has_perm("ledger.change_project")
    form = LandingSettingsForm(initial=_initial(project))
    if request.method == "POST":
        if not may_change:
            raise PermissionDenied
        form = LandingSettingsForm(request.POST)
        if form.is_valid():
            try:
                changed = project_set_landing(project=project, settings=form.settings(), actor=Actor(user=request.user))
            except LedgerError as exc:
                form.add_error(None, f"{exc.code}: {exc.message}")
            else:
                if changed:
                    LogEntry.objects.log_actions(
                        user_id=int(request.user.pk or 0),
                        queryset=[project],
                        action_flag=CHANGE,
                        change_message=f"Landing settings: {', '.join(sorted(changed))}.",
                        single_object=True,
                    )
                    messages.success(
                        request, f"Saved the landing settings of {project.slug}: {', '.join(sorted(changed))}."
                    )
                else:
                    messages.info(request, "Nothing changed.")
                return HttpResponseRedirect(request.path)
    context = {
        **site.each_context(request),
        "title": f"Landing · {project.slug}",
        "project": project,
        "landing": landing_overview(project, now=clock.now()),
        "form": form,
        "may_change": may_change,
        "project_url": reverse("admin:ledger_project_change", args=[project.pk]),
        "tasks_url": reverse("admin:ledger_task_changelist"),
    }
    return TemplateResponse(request, "admin/leasehold/landing.html", context)


def landing_index(request: HttpRequest, site: Any) -> HttpResponse:
    """`/admin/landing/`: the first project with landing on, else the project list."""
    if not request.user.has_perm("ledger.view_task"):
        raise PermissionDenied
    project = Project.objects.exclude(target_branch="").order_by("slug").first()
    if project is None:
        raise Http404("No project has landing on: set a target branch on a project's landing page or with set_landing.")
    return HttpResponseRedirect(reverse("admin:leasehold_landing", args=[project.slug]))
