"""One runner's page (`/admin/runners/runner/<id>/change/`): what it is, its slots as the ledger and the
runner see them, its latest events, and the buttons for its levers (`console.runners.actions`).

A slot shows the ledger's live attempt of its agent (the one cancel acts on) and, beside it, what the
runner last reported when that differs. Every slot's attempt comes from one query, whatever the
number of slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from console.audit.alerts import event_label, human_duration, moment_utc
from console.runners.cells import ago, busy_idle, labels_cell, status_badges
from leases.models import Attempt
from ledger import clock
from ledger.models import Event
from runners.models import Runner, RunnerSlot
from runners.selectors import live_attempts_of_slots, runner_events, runner_status, runners_with_slots


@dataclass(frozen=True)
class SlotRow:
    slot: RunnerSlot
    agent_url: str
    live: Attempt | None
    attempt_url: str
    task_url: str
    since: str  # how long the live attempt has run, or how long ago the slot last reported
    since_title: str
    reported_differs: bool  # the runner reports an attempt other than the ledger's live one
    cancel_url: str


@dataclass(frozen=True)
class EventRow:
    event: Event
    label: str
    when: str
    summary: str


def _last_reported(slot: RunnerSlot, runner: Runner) -> datetime | None:
    """When the runner last reported the slot: a heartbeat reports every slot but writes only the changed ones
    (`runners.services.runner_heartbeat`), so an unchanged slot was last reported at the runner's last beat."""
    if slot.reported_at is None:
        return None
    beat = runner.last_heartbeat_at
    return max(slot.reported_at, beat) if beat is not None else slot.reported_at


def _slot_row(slot: RunnerSlot, live: Attempt | None, *, now: datetime, runner: Runner) -> SlotRow:
    if live is not None:
        since, title = f"for {human_duration((now - live.claimed_at).total_seconds())}", moment_utc(live.claimed_at)
    elif (reported := _last_reported(slot, runner)) is not None:
        since, title = f"reported {human_duration((now - reported).total_seconds())} ago", moment_utc(reported)
    else:
        since, title = "never reported", ""
    return SlotRow(
        slot=slot,
        agent_url=reverse("admin:ledger_agent_change", args=[slot.agent_id]),
        live=live,
        attempt_url=reverse("admin:leases_attempt_change", args=[live.pk]) if live else "",
        task_url=reverse("admin:ledger_task_change", args=[live.task_id]) if live else "",
        since=since,
        since_title=title,
        reported_differs=slot.attempt_id is not None and (live is None or live.pk != slot.attempt_id),
        cancel_url=reverse("admin:runners_runner_cancel_attempt", args=[runner.pk, slot.number, live.pk])
        if live
        else "",
    )


def _summary(event: Event) -> str:
    payload = event.payload if isinstance(event.payload, dict) else {}
    shown = {key: value for key, value in payload.items() if key != "runner"}
    return ", ".join(
        f"{key}: {', '.join(map(str, value)) or '—' if isinstance(value, list) else value}"
        for key, value in shown.items()
    )


def detail_context(runner: Runner, *, now: datetime) -> dict[str, Any]:
    slots = list(runner.slot_rows.all())
    live = live_attempts_of_slots(slots, now=now)
    busy, idle = busy_idle(slots)
    events = [
        EventRow(event=e, label=event_label(e.type), when=moment_utc(e.created_at), summary=_summary(e))
        for e in runner_events(runner)
    ]
    return {
        "runner": runner,
        "status": runner_status(runner, now=now),
        "badges": status_badges(runner, now=now),
        "labels": labels_cell(list(runner.labels)),
        "projects": ", ".join(project.slug for project in runner.projects.all()) or "—",
        "heartbeat": ago(runner.last_heartbeat_at, now=now),
        "registered": ago(runner.registered_at, now=now),
        "busy": busy,
        "idle": idle,
        "slots": [_slot_row(slot, live.get(slot.agent_id), now=now, runner=runner) for slot in slots],
        "events": events,
    }


def detail_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    runner: Runner = get_object_or_404(runners_with_slots(), pk=object_id)
    can_operate = model_admin.has_operate_permission(request)
    actions = []
    if can_operate:
        names = [
            "uncordon" if runner.cordoned_at else "cordon",
            "undrain" if runner.draining_at else "drain",
        ]
        actions = [(name, reverse(f"admin:runners_runner_{name}", args=[runner.pk])) for name in names]
        actions.append(("rotate token", reverse("admin:runners_runner_rotate", args=[runner.pk])))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Runner {runner.name}",
        "subtitle": None,
        "opts": model_admin.opts,
        "original": runner,
        "can_operate": can_operate,
        "actions": actions,
        **detail_context(runner, now=clock.now()),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/runners/runner/detail.html", context)
