"""Agents: creation, tokens, project membership, deactivation, the run heartbeat."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.label_sets import validate_label_set
from ledger.models import Agent, EventType, Project
from ledger.services.events import event_append
from ledger.services.task_reservations import reservations_clear_for
from ledger.services.validation import validate_model
from ledger.tokens import hash_token, new_agent_token, swap_active_token_hash

LAST_SEEN_THROTTLE = timedelta(seconds=30)


@write_transaction
def agent_create(
    *, handle: str, kind: str, actor: Actor, projects: Iterable[Project] = (), labels: Sequence[str] = ()
) -> tuple[Agent, str]:
    """Create an agent; returns it and its API token, which is never stored or shown again.

    `labels` (SPEC §23.1): what it can do; it claims only tasks whose `requires` are all among them."""
    now = clock.now()
    token = new_agent_token()
    labels = validate_label_set(labels, field="labels")
    agent = Agent(handle=handle, kind=kind, token_hash=hash_token(token), created_at=now, labels=labels)
    validate_model(agent)
    if Agent.objects.filter(handle=handle).exists():
        raise ValidationFailed(f"An agent {handle!r} exists.", details={"fields": {"handle": ["taken"]}})
    agent.save()
    project_list = list(projects)
    agent.projects.set(project_list)
    event_append(
        type=EventType.AGENT_CREATED,
        actor=actor,
        at=now,
        payload={
            "handle": handle,
            "kind": kind,
            "projects": sorted(p.slug for p in project_list),
            **({"labels": labels} if labels else {}),
        },
    )
    return agent, token


@write_transaction
def agent_set_labels(*, agent: Agent, labels: Sequence[str], actor: Actor) -> bool:
    """Make `labels` the agent's capability labels (SPEC §23.1); one `agent.labels_changed` event when they
    change. Returns whether they changed. Claims read the labels from the agent's row, so the change holds
    from the next claim on (a claim wait already parked sees it at its next try). The order is kept as
    given; the same set in another order is no change.
    """
    labels = validate_label_set(labels, field="labels")
    now = clock.now()
    locked = Agent.objects.select_for_update(no_key=True).get(pk=agent.pk)
    if set(locked.labels or []) == set(labels):
        agent.labels = locked.labels
        return False
    Agent.objects.filter(pk=agent.pk).update(labels=labels)
    agent.labels = labels
    event_append(
        type=EventType.AGENT_LABELS_CHANGED,
        actor=actor,
        at=now,
        payload={"handle": agent.handle, "labels": labels, "was": list(locked.labels or [])},
    )
    return True


@write_transaction
def agent_rotate_token(*, agent: Agent, actor: Actor) -> tuple[Agent, str]:
    """Replace the agent's token; the old one stops working in the same commit.

    A deactivated agent's token is refused anyway, so a new one would be a token that only
    ever answers 401: refused (compare-and-set on `is_active`). Reactivate the agent first.
    """
    now = clock.now()
    token = new_agent_token()
    if not swap_active_token_hash(agent, token):
        raise ValidationFailed(
            f"Agent {agent.handle} is deactivated: its tokens are refused. Reactivate it first, then rotate.",
            details={"agent": agent.handle, "reason": "agent_deactivated"},
        )
    event_append(type=EventType.AGENT_TOKEN_ROTATED, actor=actor, at=now, payload={"handle": agent.handle})
    return agent, token


@dataclass(frozen=True)
class ProjectsChanged:
    agent: Agent
    added: list[str]  # slugs
    removed: list[str]


@write_transaction
def agent_set_projects(*, agent: Agent, projects: Iterable[Project], actor: Actor) -> ProjectsChanged:
    """Make `projects` exactly the projects the agent may see; one `agent.projects_changed` event if any changed.

    The agent's leases in a project it loses are `leases.services.agent_set_projects`'s
    business (it wraps this one and revokes them); doors call that one.
    """
    now = clock.now()
    agent = Agent.objects.select_for_update(no_key=True).get(pk=agent.pk)
    wanted = {project.pk: project for project in projects}
    current = {project.pk: project for project in agent.projects.all()}
    added = sorted(wanted[pk].slug for pk in wanted.keys() - current.keys())
    removed = sorted(current[pk].slug for pk in current.keys() - wanted.keys())
    if added or removed:
        agent.projects.set(wanted.values())
        event_append(
            type=EventType.AGENT_PROJECTS_CHANGED,
            actor=actor,
            at=now,
            payload={"handle": agent.handle, "added": added, "removed": removed},
        )
    if removed:
        # A reservation the agent can no longer claim would leave its task waiting for nobody.
        reason = f"{agent.handle} lost access to project {', '.join(removed)}"
        reservations_clear_for(agent=agent, actor=actor, reason=reason, now=now, project_slugs=removed)
    return ProjectsChanged(agent=agent, added=added, removed=removed)


REASON_MAX_CHARS = 2000


def _clean_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX_CHARS:
        raise ValidationFailed(
            f"The reason is at most {REASON_MAX_CHARS} characters.", details={"fields": {"reason": ["too long"]}}
        )
    return reason


@write_transaction
def agent_deactivate(*, agent: Agent, actor: Actor, reason: str = "") -> Agent:
    """Refuse the agent's token from now on; clear its reservations. Its attempts run out on their own leases.

    The reason, when given, is recorded in the `agent.deactivated` event.
    """
    reason = _clean_reason(reason)
    now = clock.now()
    changed = Agent.objects.filter(pk=agent.pk, is_active=True).update(is_active=False, deactivated_at=now)
    agent.refresh_from_db()
    if changed:
        payload: dict[str, str] = {"handle": agent.handle}
        if reason:
            payload["reason"] = reason[:500]
        event_append(type=EventType.AGENT_DEACTIVATED, actor=actor, at=now, payload=payload)
        reservations_clear_for(agent=agent, actor=actor, reason=f"{agent.handle} was deactivated", now=now)
    return agent


@write_transaction
def agent_reactivate(*, agent: Agent, actor: Actor, reason: str = "") -> Agent:
    """Accept the agent's token again (the one it had; rotate it for a new one). One `agent.reactivated` event."""
    reason = _clean_reason(reason)
    now = clock.now()
    changed = Agent.objects.filter(pk=agent.pk, is_active=False).update(is_active=True, deactivated_at=None)
    agent.refresh_from_db()
    if changed:
        payload: dict[str, str] = {"handle": agent.handle}
        if reason:
            payload["reason"] = reason[:500]
        event_append(type=EventType.AGENT_REACTIVATED, actor=actor, at=now, payload=payload)
    return agent


@write_transaction
def agent_pause(*, agent: Agent, actor: Actor, reason: str = "") -> bool:
    """Pause (drain) the agent: every claim it makes is refused `AGENT_PAUSED` from now on, while the leases it
    holds renew and finish as usual. Compare-and-set: pausing a paused agent changes nothing and appends no event.
    Returns whether it changed.
    """
    reason = _clean_reason(reason)
    now = clock.now()
    changed = Agent.objects.filter(pk=agent.pk, claims_paused_at__isnull=True).update(
        claims_paused_at=now, pause_reason=reason[:500]
    )
    agent.refresh_from_db()
    if changed:
        payload: dict[str, str] = {"handle": agent.handle}
        if reason:
            payload["reason"] = reason[:500]
        event_append(type=EventType.AGENT_PAUSED, actor=actor, at=now, payload=payload)
    return bool(changed)


@write_transaction
def agent_resume(*, agent: Agent, actor: Actor, reason: str = "") -> bool:
    """Let a paused agent claim again. One `agent.resumed` event when it was paused; returns whether it changed."""
    reason = _clean_reason(reason)
    now = clock.now()
    changed = Agent.objects.filter(pk=agent.pk, claims_paused_at__isnull=False).update(
        claims_paused_at=None, pause_reason=""
    )
    agent.refresh_from_db()
    if changed:
        payload: dict[str, str] = {"handle": agent.handle}
        if reason:
            payload["reason"] = reason[:500]
        event_append(type=EventType.AGENT_RESUMED, actor=actor, at=now, payload=payload)
    return bool(changed)


def agent_heartbeat(*, agent: Agent) -> datetime:
    """The run heartbeat (SPEC §8): touches `last_seen_at`, at most one write per 30 s. No event."""
    now = clock.now()
    Agent.objects.filter(
        Q(last_seen_at__isnull=True) | Q(last_seen_at__lte=now - LAST_SEEN_THROTTLE), pk=agent.pk
    ).update(last_seen_at=now)
    return now
