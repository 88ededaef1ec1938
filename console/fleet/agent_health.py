"""Agent health (`/admin/ledger/agent/health/`): one row per agent, and the levers an operator pulls on one.

- alive / late / silent since *t* (`insight.agent_health`), live leases with
  time left, last checkpoint, 7-day done / failed / expired;
- **Force-release everything it holds…**: the revoke confirmation (reason and
  "I have confirmed the agent process is gone"), then
  `leases.services.task_force_release` per live lease;
- **Deactivate…** with a reason (`ledger.services.agent_deactivate`) and
  **Reactivate…** (`ledger.services.agent_reactivate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.audit.alerts import human_duration, moment_utc
from console.base import ConfirmationForm, actor_of, plural
from console.confirm import Confirmation, RevokeForm, is_confirmed, render_confirmation
from console.permissions import may_see_page
from core.errors import LedgerError
from insight.agent_health import ALIVE, LATE, NEVER, AgentHealth, agent_health, holders_health, silence_limit
from leases.models import Attempt
from leases.services import task_force_release
from ledger import clock
from ledger.models import Agent
from ledger.services import agent_deactivate, agent_reactivate

STATE_BADGES = {ALIVE: "ready", LATE: "warn", NEVER: "open"}
# Within this, a holder may well still be running: the revoke confirmation says so loudly.
RECENTLY_HEARD_SECONDS = 60


@dataclass(frozen=True)
class LiveLease:
    attempt: Attempt
    left: str
    urgent: bool
    task_url: str


@dataclass(frozen=True)
class AgentRow:
    health: AgentHealth
    state_badge: SafeString
    since: str
    heartbeat: str
    leases: list[LiveLease]
    checkpoint: str
    checkpoint_url: str
    change_url: str
    release_url: str
    deactivate_url: str
    reactivate_url: str


def state_badge(health: AgentHealth) -> SafeString:
    state = health.state
    css = STATE_BADGES.get(state, "error")
    return format_html('<span class="lh-badge lh-{}">{}</span>', css, state)


def heard_text(health: AgentHealth) -> str:
    heard = health.last_heard_at
    if heard is None:
        return "never"
    return f"{moment_utc(heard)} ({human_duration((health.now - heard).total_seconds())} ago)"


def _row(health: AgentHealth, now: datetime) -> AgentRow:
    agent = health.agent
    note = health.last_checkpoint
    checkpoint = ""
    checkpoint_url = ""
    if note is not None:
        text = " ".join(note.content.split())
        checkpoint = f"{moment_utc(note.created_at)} · {note.attempt.task.key}: {text[:120]}"
        checkpoint_url = reverse("admin:leases_attempt_change", args=[note.attempt_id])
    beat = health.heartbeat_age
    return AgentRow(
        health=health,
        state_badge=state_badge(health),
        since=heard_text(health),
        heartbeat=human_duration(beat.total_seconds()) + " ago" if beat is not None else "never",
        leases=[
            LiveLease(
                attempt=attempt,
                left=human_duration((attempt.lease_expires_at - now).total_seconds()),
                urgent=(attempt.lease_expires_at - now).total_seconds() < 60,
                task_url=reverse("admin:ledger_task_change", args=[attempt.task_id]),
            )
            for attempt in health.live
        ],
        checkpoint=checkpoint,
        checkpoint_url=checkpoint_url,
        change_url=reverse("admin:ledger_agent_change", args=[agent.pk]),
        release_url=reverse("admin:ledger_agent_release_all", args=[agent.pk]),
        deactivate_url=reverse("admin:ledger_agent_deactivate_one", args=[agent.pk]),
        reactivate_url=reverse("admin:ledger_agent_reactivate", args=[agent.pk]),
    )


def health_page(model_admin: admin.ModelAdmin, request: HttpRequest) -> TemplateResponse:
    if not may_see_page(request, "agent_health"):  # the one rule for aggregates (console.permissions)
        raise PermissionDenied
    now = clock.now()
    agents = Agent.objects.all()
    if request.GET.get("all") != "1":
        agents = agents.filter(is_active=True)
    rows = [_row(health, now) for health in agent_health(now, agents=agents)]
    counts = {state: sum(1 for row in rows if row.health.state == state) for state in (ALIVE, LATE)}
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Agent health",
        "opts": model_admin.opts,
        "rows": rows,
        "now": now,
        "alive": counts[ALIVE],
        "late": counts[LATE],
        "silent": len(rows) - counts[ALIVE] - counts[LATE],
        "showing_all": request.GET.get("all") == "1",
        "silence": human_duration(silence_limit().total_seconds()),
        "can_operate": request.user.has_perm("ledger.change_agent"),
    }
    return TemplateResponse(request, "admin/ledger/agent/health.html", context)


def holder_liveness(health: AgentHealth | None) -> tuple[str, bool]:
    """What the revoke confirmation says about a holder beside the tick box, and whether it was heard just now."""
    if health is None:
        return "", False
    agent = health.agent
    beat = health.heartbeat_age
    renewed = health.last_renewed_at
    parts = [
        f"{agent.handle}: {health.state}",
        f"run heartbeat {human_duration(beat.total_seconds()) + ' ago' if beat is not None else 'never'}",
        "last renewal "
        + (
            f"{human_duration((health.now - renewed).total_seconds())} ago ({moment_utc(renewed)})"
            if renewed
            else "none"
        ),
    ]
    heard = health.heard_age
    return " · ".join(parts), heard is not None and heard.total_seconds() <= RECENTLY_HEARD_SECONDS


def revoke_liveness(attempt_ids: list[int], now: datetime) -> tuple[list[str], str]:
    """For a revoke confirmation: one line per holder (heartbeat age, last renewal), and a warning if one was
    heard from within the last minute (its process is probably still running)."""
    attempts = list(Attempt.objects.filter(pk__in=[pk for pk in attempt_ids if pk]))
    by_agent = holders_health(attempts, now)
    lines, recent = [], []
    for health in by_agent.values():
        line, heard_recently = holder_liveness(health)
        lines.append(line)
        if heard_recently:
            recent.append(health.agent.handle)
    warning = (
        f"Heard from within the last minute: {', '.join(sorted(recent))}. Its process is probably still running "
        "and would keep working without a lease; make sure it is gone before you tick the box."
        if recent
        else ""
    )
    return sorted(lines), warning


def _back(request: HttpRequest) -> str:
    return reverse("admin:ledger_agent_health")


def release_all_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    """Force-release every live lease the agent holds, after the revoke confirmation."""
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    agent = get_object_or_404(Agent, pk=object_id)
    now = clock.now()
    [health] = agent_health(now, agents=Agent.objects.filter(pk=agent.pk))
    form = RevokeForm(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        actor = actor_of(request)
        revoked, refused = [], []
        for attempt in health.live:
            try:
                result = task_force_release(task=attempt.task, actor=actor, reason=form.cleaned_data["reason"])
            except LedgerError as exc:
                refused.append(f"{attempt.task.key}: {exc.message}")
                continue
            if result.revoked is not None and result.revoked.agent_id == agent.pk:
                revoked.append(attempt.task.key)
                model_admin.log_change(request, agent, f"Force-released {attempt.task.key} (all it held).")
        model_admin.report(
            request,
            done=f"Revoked {plural(len(revoked), 'lease')} of {agent.handle}: {', '.join(revoked)}."
            if revoked
            else None,
            skipped=[] if revoked or refused else [f"{agent.handle} held no live lease."],
            refused=refused,
        )
        return HttpResponseRedirect(_back(request))
    liveness, recent = holder_liveness(health)
    confirmation = Confirmation(
        title=f"Force-release everything {agent.handle} holds",
        intro=f"Revoke each of the {plural(len(health.live), 'live lease')} of {agent.handle}. The tasks become "
        "claimable again; branches, worktrees and environments are kept (allocations are marked stale).",
        warning=(
            f"{agent.handle} was heard from {human_duration(health.heard_age.total_seconds())} ago: "
            "its process is probably still running and would keep working without a lease."
            if recent and health.heard_age is not None
            else "The holder's next write will fail with LEASE_NOT_HELD; make sure its process is gone first."
        ),
        submit_label="Yes, force-release all",
        columns=["Task", "Title", "Lease left", "Epoch", "Renewals"],
        rows=[
            (
                attempt,
                [
                    attempt.task.key,
                    attempt.task.title,
                    human_duration((attempt.lease_expires_at - now).total_seconds()),
                    attempt.epoch,
                    attempt.renew_count,
                ],
            )
            for attempt in health.live
        ],
        liveness=[liveness],
        liveness_warning=(
            f"{agent.handle} was heard from within the last minute: its process is probably still running."
            if recent
            else ""
        ),
    )
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=None,
        objects=[attempt.task for attempt in health.live],
        cancel_url=_back(request),
    )


class ReasonForm(ConfirmationForm):
    pass


def set_active_view(model_admin: Any, request: HttpRequest, object_id: str, *, active: bool) -> HttpResponse:
    """Deactivate (with a reason) or reactivate one agent, after a confirmation."""
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    agent = get_object_or_404(Agent, pk=object_id)
    form: forms.Form = ReasonForm(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        actor, reason = actor_of(request), form.cleaned_data["reason"]
        if active == agent.is_active:
            model_admin.message_user(request, f"{agent.handle} is already {'active' if active else 'inactive'}.")
        elif active:
            agent_reactivate(agent=agent, actor=actor, reason=reason)
            model_admin.log_change(request, agent, f"Reactivated: {reason}")
            model_admin.message_user(
                request, f"Reactivated {agent.handle}: its token is accepted again.", messages.SUCCESS
            )
        else:
            agent_deactivate(agent=agent, actor=actor, reason=reason)
            model_admin.log_change(request, agent, f"Deactivated: {reason}")
            model_admin.message_user(request, f"Deactivated {agent.handle}: its token is refused.", messages.SUCCESS)
        return HttpResponseRedirect(_back(request))
    now = clock.now()
    [health] = agent_health(now, agents=Agent.objects.filter(pk=agent.pk))
    if active:
        confirmation = Confirmation(
            title=f"Reactivate {agent.handle}",
            intro=f"{agent.handle}'s API token (the one it had) is accepted again from now on. "
            "Rotate the token afterwards if it may have leaked.",
            submit_label="Yes, reactivate",
            columns=["Agent", "Kind", "Deactivated at"],
            rows=[(agent, [agent.handle, agent.get_kind_display(), moment_utc(agent.deactivated_at)])],
            danger=False,
        )
    else:
        confirmation = Confirmation(
            title=f"Deactivate {agent.handle}",
            intro="Its API token is refused from now on. Its live leases are not revoked: they run out on their own "
            "(force-release them to free the tasks sooner). Reactivate it here to accept the token again.",
            submit_label="Yes, deactivate",
            columns=["Agent", "Kind", "State", "Live leases"],
            rows=[(agent, [agent.handle, agent.get_kind_display(), health.state, len(health.live)])],
        )
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=None,
        objects=[agent],
        cancel_url=_back(request),
    )
