"""The runners' levers (SPEC §23.1), each confirmed first (Django's `delete_selected` is the model),
run through `runners.services` with the admin user as actor, and written to the admin's LogEntry.

Cordon, uncordon, drain and undrain run on the runners selected in the list (admin actions) or on
one runner from its page; cancel-attempt on one slot of one runner; rotate-token shows the new token
once, on the page the confirming POST renders (never stored, never in a message or a log entry).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from console.audit.alerts import human_duration
from console.base import actor_of, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from console.runners.cells import ago, busy_idle, status_badges
from core.errors import LedgerError
from ledger import clock
from runners.models import Runner, RunnerSlot
from runners.selectors import live_attempts_of_slots, runners_with_slots
from runners.services import (
    runner_cordon,
    runner_drain,
    runner_rotate_token,
    runner_uncordon,
    runner_undrain,
    slot_cancel_attempt,
)


@dataclass(frozen=True)
class Toggle:
    """One of cordon / uncordon / drain / undrain: its service and its words."""

    name: str
    service: Callable[..., bool]
    title: str
    intro: str
    done: str
    already: str
    log: str
    danger: bool


TOGGLES: dict[str, Toggle] = {
    toggle.name: toggle
    for toggle in (
        Toggle(
            name="cordon",
            service=runner_cordon,
            title="Cordon",
            intro="Each selected runner takes no new work: its slot agents are paused (claim-next refuses them, "
            "reason “runner cordoned”). What its slots run goes on: their leases renew and finish as usual. "
            "Uncordon lets it take work again.",
            done="Cordoned",
            already="Already cordoned",
            log="Cordoned: its slots take no new work.",
            danger=True,
        ),
        Toggle(
            name="uncordon",
            service=runner_uncordon,
            title="Uncordon",
            intro="Each selected runner takes work again: the slot agents it paused resume, unless it is also "
            "draining (an agent an admin paused for a reason of their own stays paused).",
            done="Uncordoned",
            already="Not cordoned",
            log="Uncordoned: its slots take work again (unless draining).",
            danger=False,
        ),
        Toggle(
            name="drain",
            service=runner_drain,
            title="Drain",
            intro="Each selected runner finishes what its slots run, then takes no new work: its slot agents are "
            "paused (reason “runner draining”) and its heartbeat answers draining, so the daemon claims nothing "
            "more and idles once its commands end. Undrain lets it take work again.",
            done="Draining",
            already="Already draining",
            log="Drain: finishes what runs, takes no new work.",
            danger=True,
        ),
        Toggle(
            name="undrain",
            service=runner_undrain,
            title="Undrain",
            intro="Each selected runner takes work again: the slot agents it paused resume, unless it is also "
            "cordoned.",
            done="Undrained",
            already="Not draining",
            log="Undrained: its slots take work again (unless cordoned).",
            danger=False,
        ),
    )
}

COLUMNS = ["Runner", "Status", "Host", "Slots busy · idle", "Last heartbeat"]


def runner_rows(runners: Sequence[Runner]) -> list[tuple[Runner, list[Any]]]:
    now = clock.now()
    rows = []
    for runner in runners:
        busy, idle = busy_idle(list(runner.slot_rows.all()))
        cells = [runner.name, status_badges(runner, now=now), runner.host or "—", f"{busy} · {idle}"]
        rows.append((runner, [*cells, ago(runner.last_heartbeat_at, now=now)]))
    return rows


def detail_url(runner: Runner) -> str:
    return reverse("admin:runners_runner_change", args=[runner.pk])


def changelist_url() -> str:
    return reverse("admin:runners_runner_changelist")


def toggle_flow(
    model_admin: Any, request: HttpRequest, runners: list[Runner], toggle: Toggle, *, action_name: str | None
) -> HttpResponse | None:
    """The confirmation page, then the service on each runner; `None` once done (the caller redirects)."""
    form = forms.Form(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        actor = actor_of(request)
        done, already, refused = [], [], []
        for runner in runners:
            try:
                changed = toggle.service(runner=runner, actor=actor)
            except LedgerError as exc:
                refused.append(f"{runner.name}: {exc.message}")
                continue
            if changed:
                model_admin.log_change(request, runner, toggle.log)
                done.append(runner.name)
            else:
                already.append(runner.name)
        model_admin.report(
            request,
            done=f"{toggle.done}: {plural(len(done), 'runner')} ({', '.join(done)})." if done else None,
            skipped=[f"{toggle.already}: {', '.join(already)}."] if already else [],
            refused=refused,
        )
        return None
    confirmation = Confirmation(
        title=f"{toggle.title} {plural(len(runners), 'runner')}",
        intro=toggle.intro,
        submit_label=f"Yes, {toggle.name}",
        columns=COLUMNS,
        rows=runner_rows(runners),
        danger=toggle.danger,
    )
    cancel = detail_url(runners[0]) if action_name is None and len(runners) == 1 else changelist_url()
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=action_name,
        objects=runners,
        cancel_url=cancel,
    )


def _operable_runner(model_admin: Any, request: HttpRequest, object_id: str) -> Runner:
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    runner: Runner = get_object_or_404(runners_with_slots(), pk=object_id)
    return runner


def toggle_view(model_admin: Any, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
    """`/admin/runners/runner/<id>/cordon/` and its siblings: the buttons on a runner's page."""
    runner = _operable_runner(model_admin, request, object_id)
    response = toggle_flow(model_admin, request, [runner], TOGGLES[name], action_name=None)
    return response or HttpResponseRedirect(detail_url(runner))


# --- rotate the runner's token, shown once ------------------------------------------------------


def token_page(request: HttpRequest, model_admin: Any, *, issued: list[tuple[Runner, str]]) -> TemplateResponse:
    """The one response that ever carries these tokens."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Rotated {plural(len(issued), 'runner token')}",
        "opts": model_admin.opts,
        "issued": issued,
    }
    response = TemplateResponse(request, "admin/runners/runner/token_once.html", context)
    response["Cache-Control"] = "no-store, max-age=0"
    response["Pragma"] = "no-cache"
    return response


def rotate_flow(
    model_admin: Any, request: HttpRequest, runners: list[Runner], *, action_name: str | None
) -> HttpResponse | None:
    form = forms.Form(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        actor = actor_of(request)
        issued = []
        for runner in runners:
            try:
                rotated, token = runner_rotate_token(runner=runner, actor=actor)
            except LedgerError as exc:
                model_admin.message_user(request, exc.message, messages.ERROR)
                continue
            model_admin.log_change(request, rotated, "Rotated the runner token; the new one was shown once.")
            issued.append((rotated, token))
        if not issued:
            return None
        return token_page(request, model_admin, issued=issued)
    confirmation = Confirmation(
        title=f"Rotate the token of {plural(len(runners), 'runner')}",
        intro="Each selected runner gets a new runner token, shown once on the next page. The old token is "
        "refused at once: the daemon must be given the new one (its token file) and restarted. "
        "The slot agents' tokens are not touched: the next registration mints new ones.",
        warning="A running daemon keeps its slots' work going but cannot heartbeat or register with the old token: "
        "after a few missed heartbeats it shows as offline, then lost.",
        submit_label="Yes, rotate",
        columns=COLUMNS,
        rows=runner_rows(runners),
    )
    cancel = detail_url(runners[0]) if action_name is None and len(runners) == 1 else changelist_url()
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=action_name,
        objects=runners,
        cancel_url=cancel,
    )


def rotate_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    runner = _operable_runner(model_admin, request, object_id)
    return rotate_flow(model_admin, request, [runner], action_name=None) or HttpResponseRedirect(detail_url(runner))


# --- cancel one slot's attempt ------------------------------------------------------------------


class CancelAttemptForm(forms.Form):
    note = forms.CharField(
        label="Note",
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "placeholder": "Why? Recorded on the attempt."}),
        help_text="Added to the hand-off note on the attempt and to the runner's event.",
    )


def cancel_attempt_view(
    model_admin: Any, request: HttpRequest, object_id: str, number: int, attempt_id: int
) -> HttpResponse:
    """Cancel the attempt the runner's page showed on slot `number`: hand it off now and have the runner
    SIGTERM its command. A slot that moved on to another attempt since is refused, never the wrong one cancelled."""
    runner = _operable_runner(model_admin, request, object_id)
    slot = get_object_or_404(RunnerSlot.objects.select_related("agent", "runner"), runner=runner, number=number)
    back = HttpResponseRedirect(detail_url(runner))
    form = CancelAttemptForm(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        try:
            cancelled = slot_cancel_attempt(
                slot=slot, actor=actor_of(request), attempt_id=attempt_id, note=form.cleaned_data["note"]
            )
        except LedgerError as exc:
            model_admin.message_user(request, exc.message, messages.ERROR)
            return back
        model_admin.log_change(
            request,
            runner,
            f"Cancelled attempt {cancelled} on slot {slot.number} ({slot.agent.handle}): handed off, "
            "and the runner is told to stop its command.",
        )
        model_admin.message_user(
            request,
            f"Cancelled attempt {cancelled} on slot {slot.number} of {runner.name}: its task is claimable again; "
            "the runner stops the command at its next heartbeat.",
            messages.SUCCESS,
        )
        return back
    now = clock.now()
    live = live_attempts_of_slots([slot], now=now).get(slot.agent_id)
    if live is None or live.pk != attempt_id:
        model_admin.message_user(
            request, f"Slot {slot.number} of {runner.name} no longer holds attempt {attempt_id}.", messages.WARNING
        )
        return back
    confirmation = Confirmation(
        title=f"Cancel attempt {live.pk} on {runner.name} slot {slot.number}",
        intro="The attempt is handed off now (reason user_request, with a note that it was cancelled from the "
        "console): its task is claimable again at once, and the runner's next heartbeat tells it to send the "
        "slot's command SIGTERM. The branch and worktree are kept for the successor.",
        submit_label="Yes, cancel the attempt",
        columns=["Slot", "Agent", "Task", "Attempt", "Running for"],
        rows=[
            (
                slot,
                [
                    slot.number,
                    slot.agent.handle,
                    f"{live.task.key} {live.task.title}",
                    f"#{live.pk} ({live.kind})",
                    human_duration((now - live.claimed_at).total_seconds()),
                ],
            )
        ],
    )
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=None,
        objects=[slot],
        cancel_url=detail_url(runner),
    )
