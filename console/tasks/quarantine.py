"""The task admin's "release from quarantine" action (SPEC §16.4), kept out of `console/tasks/tasks.py`.

A quarantined task (blocked with the reason "quarantined: …") becomes ready again through
`leases.services.task_release_quarantine`; its next attempts start a fresh streak. Other
tasks are reported as skipped. The task's page offers the same as a button (`release_view`,
POST only); the list shows a "Quarantined" badge and filter (`console.tasks.parts`).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.base import LeaseholdModelAdmin, actor_of, plural
from core.errors import LedgerError
from leases.services import task_release_quarantine
from leases.services.quarantine import is_quarantined
from ledger.models import Task


def release_quarantined(model_admin: LeaseholdModelAdmin, request: HttpRequest, queryset: QuerySet[Task]) -> None:
    released: list[str] = []
    skipped: list[str] = []
    refused: list[str] = []
    for task in queryset:
        if not is_quarantined(task):
            skipped.append(task.key)
            continue
        try:
            task = task_release_quarantine(task=task, actor=actor_of(request))
        except LedgerError as exc:
            refused.append(f"{task.key}: {exc.message}")
            continue
        released.append(task.key)
        model_admin.log_change(request, task, "Released from quarantine.")
    model_admin.report(
        request,
        done=f"{plural(len(released), 'task')} released from quarantine: {', '.join(released[:10])}."
        if released
        else None,
        skipped=[f"{plural(len(skipped), 'task')} not quarantined: {', '.join(skipped[:10])}."] if skipped else [],
        refused=refused,
    )


def release_view(model_admin: LeaseholdModelAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The task page's "Release from quarantine" button: the service, a LogEntry, back to the task."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    task = get_object_or_404(Task, pk=object_id)
    try:
        released = task_release_quarantine(task=task, actor=actor_of(request))
    except LedgerError as exc:
        model_admin.message_user(request, exc.message, messages.ERROR)
    else:
        model_admin.log_change(request, released, "Released from quarantine.")
        model_admin.message_user(request, f"{task.key} released from quarantine: it is ready.", messages.SUCCESS)
    return HttpResponseRedirect(reverse("admin:ledger_task_change", args=[task.pk]))
