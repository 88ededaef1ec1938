"""Agent health (`/admin/ledger/agent/health/`): one row per agent, and the levers an operator pulls on one.

- alive / late / silent since *t* (`insight.agent_health`), live leases with
  time left, last checkpoint, 7-day done / failed / expired;
- **Force-release everything it holds…**: the revoke confirmation (reason and
  "I have confirmed the agent process is gone"), then
  `leases.services.task_force_release` per live lease;
- **Deactivate…** with a reason (`ledger.services.agent_deactivate`) and
  **Reactivate…** (`ledger.services.agent_reactivate`);
- **Pause (drain)…** and **Resume…** (`ledger.services.agent_pause` /
  `agent_resume`): no new claims (`AGENT_PAUSED`), its live leases run on.

The state is the evidence's (`insight.agent_health`): the reconciler's open
findings on the agent's attempts are linked from its row, and a holder they
say is dead is never described as "probably still running".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

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
from insight.agent_health import (
    ALIVE,
    BUDGET_SPENT,
    LATE,
    NEVER,
    AgentHealth,
    agent_health,
    holders_health,
    silence_limit,
)
from leases.models import Attempt
from leases.services import task_force_release
from ledger import clock
from ledger.models import Agent
from ledger.services import agent_deactivate, agent_pause, agent_reactivate, agent_resume
from reconciliation.models import Condition

STATE_BADGES = {ALIVE: "ready", LATE: "warn", NEVER: "open", BUDGET_SPENT: "warn"}
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
    pause_url: str
    resume_url: str
    findings_url: str
    findings_text: str
    incidents_url: str


@dataclass(frozen=True)
class StateTile:
    """A count of agents in one state at the top of the page; `level` colours it when the count is not 0."""

    label: str
    count: int
    level: str = ""
    element_id: str = ""


def state_tiles(rows: list[AgentRow]) -> list[StateTile]:
    """Alive, late, budget spent, silent (every other state, never heard from included), and paused."""
    counts = Counter(row.health.state for row in rows)
    silent = len(rows) - counts[ALIVE] - counts[LATE] - counts[BUDGET_SPENT]
    return [
        StateTile("Alive", counts[ALIVE], element_id="lh-alive-count"),
        StateTile("Late", counts[LATE], "lh-stat-warn"),
        StateTile("Budget spent", counts[BUDGET_SPENT], "lh-stat-warn"),
        StateTile("Silent or never heard", silent, "lh-stat-alert"),
        StateTile("Paused", sum(1 for row in rows if row.health.paused)),
    ]


def state_badge(health: AgentHealth) -> SafeString:
    state = health.state
    css = STATE_BADGES.get(state, "error")
    return format_html('<span class="lh-badge lh-{}">{}</span>', css, state)


def findings_url(agent: Agent) -> str:
    return (
        reverse("admin:reconciliation_finding_changelist")
        + "?"
        + urlencode({"agent": agent.handle, "status__exact": "unresolved"})
    )


def findings_text(health: AgentHealth) -> str:
    """`2 open findings: Live lease, silent agent (1), Renewed, but not working (1)`, or ''."""
    if not health.findings:
        return ""
    labels = dict(Condition.choices)
    parts = [f"{labels.get(condition, condition)} ({n})" for condition, n in sorted(health.findings.items())]
    return f"{plural(health.open_findings, 'open finding')}: {', '.join(parts)}"


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
        pause_url=reverse("admin:ledger_agent_pause", args=[agent.pk]),
        resume_url=reverse("admin:ledger_agent_resume", args=[agent.pk]),
        findings_url=findings_url(agent),
        findings_text=findings_text(health),
        incidents_url=reverse("admin:insight_incident_changelist")
        + "?"
        + urlencode({"subject": f"agent:{agent.handle}"}),
    )


def health_page(model_admin: admin.ModelAdmin, request: HttpRequest) -> TemplateResponse:
    if not may_see_page(request, "agent_health"):  # the one rule for aggregates (console.permissions)
        raise PermissionDenied
    now = clock.now()
    agents = Agent.objects.all()
    if request.GET.get("all") != "1":
        agents = agents.filter(is_active=True)
    rows = [_row(health, now) for health in agent_health(now, agents=agents)]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Agent health",
        "opts": model_admin.opts,
        "rows": rows,
        "now": now,
        "tiles": state_tiles(rows),
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
        *([findings_text(health)] if health.findings else []),
        f"run heartbeat {human_duration(beat.total_seconds()) + ' ago' if beat is not None else 'never'}",
        "last renewal "
        + (
            f"{human_duration((health.now - renewed).total_seconds())} ago ({moment_utc(renewed)})"
            if renewed
            else "none"
        ),
    ]
    heard = health.heard_age
    # A renewal is heard, but when the findings (or a stopped run heartbeat) say the process is gone, the renewer
    # is a keeper, not the worker: no "probably still running".
    recent = heard is not None and heard.total_seconds() <= RECENTLY_HEARD_SECONDS and not health.presumed_dead
    return " · ".join(parts), recent


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
            else (
                f"The evidence says {agent.handle}'s process is gone ({findings_text(health) or health.state}); "
                "what still renews its leases is not working on them."
                if health.presumed_dead
                else "The holder's next write will fail with LEASE_NOT_HELD; make sure its process is gone first."
            )
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


STATE_COLUMNS = ["Agent", "Kind", "State", "Live leases"]


def state_row(health: AgentHealth) -> tuple[Agent, list[Any]]:
    """The agent's row on a deactivate or pause confirmation (`STATE_COLUMNS`)."""
    agent = health.agent
    return (agent, [agent.handle, agent.get_kind_display(), health.state, len(health.live)])


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
            columns=STATE_COLUMNS,
            rows=[state_row(health)],
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


def set_paused_view(model_admin: Any, request: HttpRequest, object_id: str, *, paused: bool) -> HttpResponse:
    """Pause (drain) or resume one agent, after a confirmation with a reason; a LogEntry either way."""
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    agent = get_object_or_404(Agent, pk=object_id)
    form: forms.Form = ReasonForm(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        actor, reason = actor_of(request), form.cleaned_data["reason"]
        if paused:
            changed = agent_pause(agent=agent, actor=actor, reason=reason)
            done = f"Paused {agent.handle}: its claims are refused (AGENT_PAUSED); its live leases run on."
        else:
            changed = agent_resume(agent=agent, actor=actor, reason=reason)
            done = f"Resumed {agent.handle}: it claims again."
        if changed:
            model_admin.log_change(request, agent, f"{'Paused' if paused else 'Resumed'}: {reason}")
            model_admin.message_user(request, done, messages.SUCCESS)
        else:
            model_admin.message_user(request, f"{agent.handle} is already {'paused' if paused else 'claiming'}.")
        return HttpResponseRedirect(_back(request))
    now = clock.now()
    [health] = agent_health(now, agents=Agent.objects.filter(pk=agent.pk))
    if paused:
        confirmation = Confirmation(
            title=f"Pause (drain) {agent.handle}",
            intro=f"{agent.handle} claims no new work from now on: every claim and claim-next is refused with "
            "AGENT_PAUSED (a `leasehold run` asking for work stops). Its live leases are not touched: they renew "
            "and finish as usual. Its token keeps working; resume it here.",
            submit_label="Yes, pause",
            columns=STATE_COLUMNS,
            rows=[state_row(health)],
            danger=False,
        )
    else:
        confirmation = Confirmation(
            title=f"Resume {agent.handle}",
            intro=f"{agent.handle} may claim work again from its next request.",
            submit_label="Yes, resume",
            columns=["Agent", "Kind", "Paused at", "Reason"],
            rows=[
                (
                    agent,
                    [agent.handle, agent.get_kind_display(), moment_utc(agent.claims_paused_at), agent.pause_reason],
                )
            ],
            danger=False,
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
