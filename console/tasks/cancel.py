"""Cancelling tasks from the admin, with or without force-releasing a live lease (`leases.services.task_cancel`).

A task under a live lease gets a confirmation page offering "also
force-release" (ticked by default) and the revocation's reason; tasks nobody
holds are cancelled at once from the list. `TaskCancelMixin` is mixed into
`console.tasks.tasks.TaskAdmin`, which supplies the columns, `report` and `log_change`.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.base import actor_of, plural, task_lease_left
from console.confirm import CancelForm, Confirmation, is_confirmed, render_confirmation
from console.fleet.agent_health import revoke_liveness
from core.errors import LedgerError
from leases.services import task_cancel
from ledger import clock
from ledger.models import Task


class TaskCancelMixin:
    get_queryset: Any
    has_operate_permission: Any
    log_change: Any
    report: Any
    effective_status_badge: Any
    holder: Any

    # --- cancel, with or without force-releasing the live lease ---------------

    def _cancel_flow(
        self, request: HttpRequest, tasks: list[Task], *, action_name: str | None, done_url: str | None = None
    ) -> HttpResponse | None:
        live = [task for task in tasks if getattr(task, "holder_attempt_id", None) is not None]
        if not live and action_name is not None:  # nothing held: nothing to decide about
            self._cancel(request, tasks, release=False, reason="")
            return None
        form = CancelForm(request.POST if is_confirmed(request) else None, has_live_lease=bool(live))
        if form.is_bound and form.is_valid():
            release = bool(live) and form.cleaned_data.get("also_release", False)
            self._cancel(request, tasks, release=release, reason=form.cleaned_data.get("reason") or "")
            return HttpResponseRedirect(done_url) if done_url else None
        now = clock.now()
        # With "also force-release" this is a revoke: the same liveness lines and warning as force-release's page.
        liveness, liveness_warning = revoke_liveness([getattr(t, "holder_attempt_id", 0) or 0 for t in live], now)
        confirmation = Confirmation(
            liveness=liveness,
            liveness_warning=liveness_warning,
            title=f"Cancel {plural(len(tasks), 'task')}",
            intro="Cancelled tasks are never deleted; reopen one to bring it back (cancelled → open).",
            warning=(
                f"{plural(len(live), 'task')} of these {'is' if len(live) == 1 else 'are'} under a live lease. "
                "With “also force-release” the holder's lease is revoked now (its next write fails with "
                "LEASE_NOT_HELD; its branch, worktree and environment are kept). Without it the holder keeps "
                "its lease, is told at its next renewal that the task was cancelled, and ends the attempt "
                "itself; until then the list shows “cancelled (lease still live)”."
                if live
                else "None of these tasks is under a live lease."
            ),
            submit_label="Yes, cancel",
            columns=["Task", "Status", "Holder", "Lease left", "Title"],
            rows=[
                (
                    task,
                    [
                        task.key,
                        self.effective_status_badge(task),
                        self.holder(task),
                        task_lease_left(task, now),
                        task.title,
                    ],
                )
                for task in tasks
            ],
        )
        return render_confirmation(
            request,
            cast(admin.ModelAdmin, self),  # mixed into TaskAdmin
            confirmation=confirmation,
            form=form,
            action_name=action_name,
            objects=tasks,
            cancel_url=done_url or reverse("admin:ledger_task_changelist"),
        )

    def _cancel(self, request: HttpRequest, tasks: list[Task], *, release: bool, reason: str) -> None:
        actor = actor_of(request)
        cancelled: list[str] = []
        unchanged: list[str] = []
        refused: list[str] = []
        released = 0
        still_live = 0
        for task in tasks:
            try:
                result = task_cancel(task=task, actor=actor, release=release, reason=reason)
            except LedgerError as exc:
                refused.append(f"{task.key}: {exc.message}")
                continue
            revoked = result.revocation.revoked if result.revocation else None
            if "status" not in result.updated.changed and revoked is None:
                unchanged.append(task.key)
                continue
            cancelled.append(task.key)
            note = f"Status {task.status} → cancelled (admin action: cancel)."
            if revoked is not None:
                released += 1
                note += f" Revoked attempt {revoked.pk} of {revoked.agent.handle}. Reason: {reason}"
            elif getattr(task, "holder_attempt_id", None) is not None:
                still_live += 1
                note += " The holder's lease is still live."
            self.log_change(request, result.updated.task, note)
        done = f"{plural(len(cancelled), 'task')} cancelled." if cancelled else None
        if done and released:
            done += f" Revoked {plural(released, 'live lease')}."
        if done and still_live:
            holds = "holds its lease" if still_live == 1 else "hold their leases"
            done += f" {plural(still_live, 'holder')} still {holds}: recorded as contested."
        skipped = (
            [f"{plural(len(unchanged), 'task')} already cancelled: {', '.join(unchanged[:10])}."] if unchanged else []
        )
        self.report(request, done=done, skipped=skipped, refused=refused)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        task = get_object_or_404(self.get_queryset(request).select_related("reserved_for"), pk=object_id)
        done_url = reverse("admin:ledger_task_change", args=[task.pk])
        response = self._cancel_flow(request, [task], action_name=None, done_url=done_url)
        assert response is not None  # with a done_url the flow always answers
        return response
