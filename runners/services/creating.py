"""Creating a runner and rotating its token (SPEC §23.1)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, AgentKind, EventType, Project
from ledger.services import agent_create, event_append
from ledger.services.validation import validate_model
from ledger.tokens import hash_token
from runners.models import LABEL_PATTERN, MAX_LABELS, MAX_SLOTS, Runner, RunnerSlot
from runners.tokens import new_runner_token


def clean_labels(labels: Iterable[str]) -> list[str]:
    """Labels as stored: lowercase handles, each once, sorted; VALIDATION_ERROR naming a bad one."""
    given = list(labels)
    cleaned = sorted({label.strip() for label in given if isinstance(label, str) and label.strip()})
    bad = [label for label in cleaned if not re.match(LABEL_PATTERN, label)]
    if bad or any(not isinstance(label, str) for label in given):
        raise ValidationFailed(
            f"Labels are lowercase letters, digits, '.', '_' and '-' (at most 40 characters): {', '.join(bad[:5])}.",
            details={"fields": {"labels": ["invalid"]}},
        )
    if len(cleaned) > MAX_LABELS:
        raise ValidationFailed(f"At most {MAX_LABELS} labels.", details={"fields": {"labels": ["too many"]}})
    return cleaned


def slot_handle(runner_name: str, number: int) -> str:
    """The slot agent's handle: `NAME.N`."""
    return f"{runner_name}.{number}"


@write_transaction
def runner_create(
    *, name: str, projects: Sequence[Project], slots: int, labels: Iterable[str] = (), actor: Actor
) -> tuple[Runner, str]:
    """Create the runner, its slot agents `NAME.1` … `NAME.N` (kind script, the runner's projects and
    labels) and their slots; returns the runner and its token, which is never stored or shown again.

    Keeps: one runner per name and one agent per slot, all or nothing (a taken slot handle refuses
    the whole runner); the runner's token is stored only as its SHA-256.
    """
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
        raise ValidationFailed(f"slots is 1 to {MAX_SLOTS}.", details={"fields": {"slots": [f"1 to {MAX_SLOTS}"]}})
    project_list = list(projects)
    if not project_list:
        raise ValidationFailed("A runner serves at least one project.", details={"fields": {"projects": ["required"]}})
    cleaned = clean_labels(labels)
    now = clock.now()
    token = new_runner_token()
    runner = Runner(name=name, token_hash=hash_token(token), labels=cleaned, slots=slots, created_at=now)
    validate_model(runner)
    if Runner.objects.filter(name=name).exists():
        raise ValidationFailed(f"A runner {name!r} exists.", details={"fields": {"name": ["taken"]}})
    runner.save()
    runner.projects.set(project_list)
    for number in range(1, slots + 1):
        agent, _ = agent_create(
            handle=slot_handle(name, number), kind=AgentKind.SCRIPT, actor=actor, projects=project_list
        )
        # The slot carries its runner's labels (claim-next matches a task's `requires` against them).
        Agent.objects.filter(pk=agent.pk).update(labels=cleaned)
        RunnerSlot.objects.create(runner=runner, number=number, agent=agent)
    event_append(
        type=EventType.RUNNER_CREATED,
        actor=actor,
        at=now,
        payload={
            "runner": name,
            "slots": slots,
            "labels": cleaned,
            "projects": sorted(project.slug for project in project_list),
        },
    )
    return runner, token


@write_transaction
def runner_rotate_token(*, runner: Runner, actor: Actor) -> tuple[Runner, str]:
    """Replace the runner's token; the old one is refused from the same commit on.

    The slot agents' tokens are not touched: the runner's next registration mints new ones.
    """
    now = clock.now()
    token = new_runner_token()
    changed = Runner.objects.filter(pk=runner.pk, is_active=True).update(token_hash=hash_token(token))
    runner.refresh_from_db()
    if not changed:
        raise ValidationFailed(
            f"Runner {runner.name} is deactivated: its token is refused anyway.",
            details={"runner": runner.name, "reason": "runner_deactivated"},
        )
    event_append(type=EventType.RUNNER_TOKEN_ROTATED, actor=actor, at=now, payload={"runner": runner.name})
    return runner, token
