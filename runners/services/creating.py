"""Creating a runner and rotating its token (SPEC §23.1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.label_sets import validate_label_set
from ledger.models import AgentKind, EventType, Project
from ledger.services import agent_create, event_append
from ledger.services.validation import validate_model
from ledger.tokens import hash_token, swap_active_token_hash
from runners.models import MAX_SLOTS, Runner, RunnerSlot
from runners.tokens import new_runner_token


def clean_labels(labels: Iterable[str]) -> list[str]:
    """Labels as stored: each once, sorted, valid by the one rule every label follows
    (`ledger.label_sets.validate_label_set`: VALIDATION_ERROR naming the bad one)."""
    given = [label.strip() if isinstance(label, str) else label for label in labels]
    if all(isinstance(label, str) for label in given):
        given = sorted({label for label in given if label})
    return validate_label_set(given, field="labels")


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
        # The slot carries its runner's labels (claim-next matches a task's `requires` against them).
        agent, _ = agent_create(
            handle=slot_handle(name, number), kind=AgentKind.SCRIPT, actor=actor, projects=project_list, labels=cleaned
        )
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
    if not swap_active_token_hash(runner, token):
        raise ValidationFailed(
            f"Runner {runner.name} is deactivated: its token is refused anyway.",
            details={"runner": runner.name, "reason": "runner_deactivated"},
        )
    event_append(type=EventType.RUNNER_TOKEN_ROTATED, actor=actor, at=now, payload={"runner": runner.name})
    return runner, token
