"""Force-release and reassign from the admin: revoking a task's live lease, with a reason, after a confirmation.

Both go through `leases.services.task_force_release` / `task_reassign`
after a confirmation page that requires a reason and the tick "I have
confirmed the agent process is gone", from the task list (actions) or from
the task's page (`<id>/force-release/`, `<id>/reassign/`); reassign offers
only agents that may claim the task. `TaskRevokeMixin` is mixed into
`console.tasks.tasks.TaskAdmin`, which supplies the columns, the URLs,
`report` and `log_change`.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.base import EMPTY, actor_of, plural, task_lease_left
from console.confirm import Confirmation, RevokeForm, is_confirmed, reassign_form_for, render_confirmation
from console.fleet.agent_health import revoke_liveness
from core.errors import LedgerError
from leases.services import task_force_release, task_reassign
from ledger import clock
from ledger.models import Agent, Task


class TaskRevokeMixin:
    get_queryset: Any
    has_operate_permission: Any
    log_change: Any
    report: Any
    effective_status_badge: Any
    holder: Any

    # --- force-release and reassign, from the list ------------------------------

    @admin.action(description="Force-release (revoke the live lease)…", permissions=["operate"])
    def force_release(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        return self._revoke_flow(request, list(queryset), reassign=False, action_name="force_release")

    @admin.action(description="Reassign to another agent…", permissions=["operate"])
    def reassign(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        return self._revoke_flow(request, list(queryset), reassign=True, action_name="reassign")

    def _revoke_flow(
        self,
        request: HttpRequest,
        tasks: list[Task],
        *,
        reassign: bool,
        action_name: str | None,
        done_url: str | None = None,
    ) -> HttpResponse | None:
        data = request.POST if is_confirmed(request) else None
        form: RevokeForm = reassign_form_for(tasks, data) if reassign else RevokeForm(data)
        if form.is_bound and form.is_valid():
            agent: Agent | None = form.cleaned_data.get("agent")
            self._revoke(request, tasks, reason=form.cleaned_data["reason"], agent=agent)
            return HttpResponseRedirect(done_url) if done_url else None
        now = clock.now()
        live = sum(1 for task in tasks if getattr(task, "holder_attempt_id", None))
        verb = "Reassign" if reassign else "Force-release"
        liveness, liveness_warning = revoke_liveness([getattr(t, "holder_attempt_id", 0) or 0 for t in tasks], now)
        confirmation = Confirmation(
            liveness=liveness,
            liveness_warning=liveness_warning,
            title=f"{verb} {plural(len(tasks), 'task')}",
            intro=(
                "Revoke the live lease of each selected task and reserve the task for the agent you choose: "
                "only that agent may claim it next."
                if reassign
                else "Revoke the live lease of each selected task. The task becomes claimable again; "
                "the holder's branch, worktree and environment are kept (its allocation is marked stale)."
            ),
            warning=(
                f"{plural(live, 'task')} of these {'has' if live == 1 else 'have'} a live lease. "
                "The holder's next write will fail with LEASE_NOT_HELD; if its process is still running "
                "it keeps working without a lease, so make sure it is gone first."
                if live
                else "None of these tasks has a live lease right now; nothing will be revoked."
                + (" The reservation is still recorded." if reassign else "")
            ),
            submit_label=f"Yes, {verb.lower()}",
            columns=["Task", "Title", "Status", "Holder", "Lease left", "Epoch", "Reserved for"],
            rows=[
                (
                    task,
                    [
                        task.key,
                        task.title,
                        self.effective_status_badge(task),
                        self.holder(task),
                        task_lease_left(task, now),
                        task.epoch,
                        task.reserved_for.handle if task.reserved_for else EMPTY,
                    ],
                )
                for task in tasks
            ],
        )
        cancel_url = done_url or reverse("admin:ledger_task_changelist")
        return render_confirmation(
            request,
            cast(admin.ModelAdmin, self),  # mixed into TaskAdmin
            confirmation=confirmation,
            form=form,
            action_name=action_name,
            objects=tasks,
            cancel_url=cancel_url,
        )

    def _revoke(self, request: HttpRequest, tasks: list[Task], *, reason: str, agent: Agent | None) -> None:
        actor = actor_of(request)
        revoked: list[str] = []
        idle: list[str] = []
        refused: list[str] = []
        for task in tasks:
            try:
                if agent is not None:
                    result = task_reassign(task=task, agent=agent, actor=actor, reason=reason)
                else:
                    result = task_force_release(task=task, actor=actor, reason=reason)
            except LedgerError as exc:
                refused.append(f"{task.key}: {exc.message}")
                continue
            parts = []
            if result.revoked is not None:
                attempt = result.revoked
                revoked.append(task.key)
                parts.append(f"Revoked attempt {attempt.pk} of {attempt.agent.handle} (epoch {attempt.epoch}).")
            else:
                idle.append(task.key)
                parts.append("No live lease to revoke.")
            if agent is not None:
                parts.append(f"Reserved for {agent.handle}.")
            parts.append(f"Reason: {reason}")
            verb = "Reassign" if agent is not None else "Force-release"
            self.log_change(request, result.task, f"{verb}: {' '.join(parts)}")
        handled = len(revoked) + len(idle)
        if agent is not None:
            done = (
                f"Reassigned {plural(handled, 'task')} to {agent.handle}; revoked {plural(len(revoked), 'live lease')}."
                if handled
                else None
            )
        else:
            done = f"Force-released {plural(len(revoked), 'task')}: revoked their live leases." if revoked else None
        skipped = [f"{plural(len(idle), 'task')} had no live lease: {', '.join(idle[:10])}."] if idle else []
        self.report(request, done=done, skipped=skipped, refused=refused)

    # --- the same two from the task's page ------------------------------------

    def _single_task_flow(self, request: HttpRequest, object_id: str, *, reassign: bool) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        task = get_object_or_404(self.get_queryset(request).select_related("reserved_for"), pk=object_id)
        done_url = reverse("admin:ledger_task_change", args=[task.pk])
        response = self._revoke_flow(request, [task], reassign=reassign, action_name=None, done_url=done_url)
        assert response is not None  # with a done_url the flow always answers
        return response

    def force_release_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._single_task_flow(request, object_id, reassign=False)

    def reassign_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._single_task_flow(request, object_id, reassign=True)
