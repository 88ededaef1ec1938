"""The task admin's "release from quarantine" action (SPEC §16.4), kept out of `console/tasks/tasks.py`.

A quarantined task (blocked with the reason "quarantined: …") becomes ready again through
`leases.services.task_release_quarantine`; its next attempts start a fresh streak. Other
tasks are reported as skipped.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest

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
