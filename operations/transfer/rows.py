"""The rows of a project export (SPEC §17): which tables, in which order, and how a value is written.

An export is JSON Lines: a `header` row (`format`), then one row per database
row, section by section in `SECTIONS` order (every row references only rows
of earlier sections, or of its own section earlier in the file), then an
`end` row with the count of every type, so a truncated file is told from a
whole one.

A row holds its type, its source `id` (when the table has its own key) and
its model's concrete fields by name. References to rows of the file are
their source ids; agents are referenced by handle and users by username,
never by id. The project itself is implied (every row belongs to it).
Never written: `SECRET_FIELDS` (token hashes and salts). Webhook endpoints
(their signing secrets) and deliveries, idempotency records, claim-refusal
tallies and agents' daily usage (one agent's spend over all its projects)
are not part of a project's export.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.db import models

from environments.models import Environment
from landing.models import Landing, LandingTask
from leases.models import (
    Allocation,
    Attempt,
    AttemptUsage,
    CheckResult,
    Note,
    PathReservation,
    ProjectDailyUsage,
    ReviewRequest,
    TaskUsage,
)
from ledger.models import Agent, Decision, Event, EventType, Project, Task, TaskComment, TaskDependency
from reconciliation.models import AttemptDiscard, Finding

FORMAT_VERSION = 1
INTEGER_MIN, INTEGER_MAX = -(2**63), 2**63 - 1
# `IntegerField` and `PositiveIntegerField` (an epoch, a count) are 32 bits on PostgreSQL; held to that everywhere.
SMALL_INTEGER_MIN, SMALL_INTEGER_MAX = -(2**31), 2**31 - 1
HEADER = "header"
END = "end"
SECRET_FIELDS = frozenset({"token_hash", "token_salt", "command_token_hash"})

# Event payload keys that hold the id of an exported row, by the event types that write them.
PAYLOAD_REFERENCES: dict[str, str] = {
    "review": "review",
    "note": "note",
    "decision": "decision",
    "comment": "comment",
    "finding": "finding",
    "last_attempt": "attempt",
    "landing": "landing",
    "last_landing": "landing",
    "inherited_from_attempt": "attempt",
}
# `decision.superseded` names the superseding decision as `by` (an id); elsewhere `by` is a label.
PAYLOAD_REFERENCES_BY_TYPE: dict[str, dict[str, str]] = {EventType.DECISION_SUPERSEDED: {"by": "decision"}}


def payload_references(event_type: str) -> dict[str, str]:
    return {**PAYLOAD_REFERENCES, **PAYLOAD_REFERENCES_BY_TYPE.get(event_type, {})}


@dataclass(frozen=True)
class Section:
    type: str
    model: builtins.type[models.Model]
    rows_of: Callable[[Project], models.QuerySet[Any]]


SECTIONS: tuple[Section, ...] = (
    Section("project", Project, lambda p: Project.objects.filter(pk=p.pk)),
    Section("environment", Environment, lambda p: Environment.objects.filter(project=p)),
    Section("task", Task, lambda p: Task.objects.filter(project=p)),
    # A blocker of another project (SPEC §22) is not a row of this file: see EXTERNAL_DEPENDENCY.
    Section(
        "dependency", TaskDependency, lambda p: TaskDependency.objects.filter(task__project=p, blocked_by__project=p)
    ),
    Section("attempt", Attempt, lambda p: Attempt.objects.filter(task__project=p)),
    Section("discard", AttemptDiscard, lambda p: AttemptDiscard.objects.filter(attempt__task__project=p)),
    Section("attempt_usage", AttemptUsage, lambda p: AttemptUsage.objects.filter(attempt__task__project=p)),
    Section("task_usage", TaskUsage, lambda p: TaskUsage.objects.filter(task__project=p)),
    Section("project_usage", ProjectDailyUsage, lambda p: ProjectDailyUsage.objects.filter(project=p)),
    Section("reservation", PathReservation, lambda p: PathReservation.objects.filter(project=p)),
    Section("note", Note, lambda p: Note.objects.filter(attempt__task__project=p)),
    Section("allocation", Allocation, lambda p: Allocation.objects.filter(attempt__task__project=p)),
    Section("review", ReviewRequest, lambda p: ReviewRequest.objects.filter(task__project=p)),
    Section("decision", Decision, lambda p: Decision.objects.filter(project=p)),
    Section("comment", TaskComment, lambda p: TaskComment.objects.filter(task__project=p)),
    Section("finding", Finding, lambda p: Finding.objects.filter(project=p)),
    Section("check", CheckResult, lambda p: CheckResult.objects.filter(project=p)),
    Section("landing", Landing, lambda p: Landing.objects.filter(project=p)),
    Section("landing_task", LandingTask, lambda p: LandingTask.objects.filter(landing__project=p)),
    Section("event", Event, lambda p: Event.objects.filter(project=p)),
)
# Every other model of Leasehold's rooms, and why a project's export leaves it out
# (tests/operations/transfer/test_round_trip.py checks that no model is forgotten).
NOT_EXPORTED: dict[str, str] = {
    "ledger.Agent": "written as `agent` rows by handle, without its token",
    "push.WebhookEndpoint": "the server's own signing secrets and targets",
    "push.WebhookDelivery": "deliveries to this server's endpoints",
    "insight.EventTally": "the /metrics position in this server's event log; advanced from the imported events",
    "insight.TaskCount": "derived: the task triggers count the imported tasks",
    "insight.TaskCountChange": "derived: the task triggers count the imported tasks",
    "leases.IdempotencyRecord": "stored answers to this server's callers",
    "leases.ClaimRefusalTally": "this server's refusal counters",
    "leases.AgentDailyUsage": "one agent's spend over all its projects",
    "leases.ReservationLock": "a lock row, not data",
    "leases.LeaseSample": "derived: the attempt and task triggers sample the imported completed attempts",
    "leases.LeaseClock": "derived: the attempt triggers keep one row per imported active attempt",
    "insight.JobHeartbeat": "this server's scheduler",
    "insight.Incident": "this server's alerts: its incident check opens them afresh from the imported state",
    "reconciliation.ReconciliationRun": "this server's runs; the findings they made are exported",
    "reconciliation.ReconcileCursor": "this server's watermark: an imported project is read in full by its first run",
    "reconciliation.TargetCursor": "this server's reading of a landing target: the first run reads it in full",
    "insight.FleetDayTally": "derived: the attempt and event triggers count the imported rows",
    "insight.FleetDayTallyChange": "derived: the attempt and event triggers count the imported rows",
    "insight.TaskFirstReady": "derived: the event trigger reads the imported task events",
    "insight.ReportDayTally": "derived: the attempt, task and first-ready triggers count the imported rows",
    "insight.ReportDayTallyChange": "derived: the attempt, task and first-ready triggers count the imported rows",
    "insight.LeadBucket": "fixed bucket bounds written by migration insight 0003",
    "insight.AgentCheckpoint": "derived: the note trigger keeps each agent's latest imported checkpoint",
    "insight.AgentDayTally": "derived: the attempt triggers count the imported ended attempts",
    "insight.AgentDayTallyChange": "derived: the attempt triggers count the imported ended attempts",
    "runners.Runner": "this server's machines and their tokens, not a project's data (their slot agents are agents)",
    "runners.RunnerSlot": "what this server's runners last reported",
}
# Agents and users come before every section (after the project): rows name them.
AGENT = "agent"
USER = "user"
# SPEC §22: a task of the project waiting for a task of another project. The other task is not the
# project's to export, so the row names it by key only (`task`: the waiting task's source id,
# `blocked_by_key`, `created_at`, `removed_at`): a reference, never the other task's title or text.
# An import reads and counts these rows and links none of them (operations.transfer.importing).
EXTERNAL_DEPENDENCY = "external_dependency"
EXTERNAL_DEPENDENCY_FIELDS = frozenset({"type", "task", "blocked_by_key", "created_at", "removed_at"})


def external_dependencies_of(project: Project) -> models.QuerySet[TaskDependency]:
    return TaskDependency.objects.filter(task__project=project).exclude(blocked_by__project=project)


ORDER: tuple[str, ...] = (
    "project",
    USER,
    AGENT,
    *(
        name
        for section in SECTIONS[1:]
        for name in ((section.type, EXTERNAL_DEPENDENCY) if section.type == "dependency" else (section.type,))
    ),
)
SECTION_BY_TYPE: dict[str, Section] = {section.type: section for section in SECTIONS}
TYPE_OF_MODEL: dict[type[models.Model], str] = {section.model: section.type for section in SECTIONS}
# A plain integer column that is a reference all the same (`ledger` cannot point at `leases`).
PLAIN_REFERENCES: dict[tuple[str, str], str] = {("event", "attempt_id"): "attempt"}
# An event id on another row: remapped to the imported events (operations.transfer.importing).
EVENT_ID_COLUMNS: dict[str, str] = {"attempt": "event_id_at_claim"}


@dataclass(frozen=True)
class Column:
    """One field of a row: its name in the file, its attribute (column) name, and what it references."""

    name: str
    attname: str
    field: models.Field[Any, Any]
    references: str = ""  # a row type, AGENT, USER, or "" for a plain value


def columns(section: Section) -> list[Column]:
    """The fields a row of `section` carries, in model order; the project and secrets are left out."""
    user_model = get_user_model()
    found: list[Column] = []
    for field in section.model._meta.concrete_fields:
        if field.name in SECRET_FIELDS or (field.primary_key and not field.is_relation):
            continue
        if field.is_relation:
            target = field.related_model
            if target is Project:
                continue
            if target is Agent:
                references = AGENT
            elif target is user_model:
                references = USER
            else:
                references = TYPE_OF_MODEL[target]  # type: ignore[index]
            found.append(Column(field.name, field.attname, field, references))
        else:
            references = PLAIN_REFERENCES.get((section.type, field.attname), "")
            name = field.attname if references else field.name
            # The row's own `type` says what the row is; a column of that name is written with its section's.
            found.append(Column(f"{section.type}_type" if name == "type" else name, field.attname, field, references))
    return found


def has_own_id(section: Section) -> bool:
    primary = section.model._meta.pk
    return primary is not None and not primary.is_relation and section.type != "project"


def encode(value: Any) -> Any:
    """A database value as JSON: datetimes and dates in ISO 8601, decimals as strings."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def decode(field: models.Field[Any, Any], value: Any) -> Any:
    """A JSON value back into what `field` stores; raises ValueError naming what was expected."""
    if value is None:
        if not field.null:
            raise ValueError("may not be null")
        return None
    if isinstance(field, models.DateTimeField):
        if not isinstance(value, str):
            raise ValueError("expected an ISO 8601 date and time")
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("expected a time with its UTC offset")
        return parsed
    if isinstance(field, models.DateField):
        if not isinstance(value, str):
            raise ValueError("expected an ISO 8601 date")
        return date.fromisoformat(value)
    if isinstance(field, models.DecimalField):
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError("expected a decimal as a string")
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise ValueError(f"expected a decimal, not {str(value)[:40]!r}") from None
        if not number.is_finite():
            raise ValueError("expected a finite decimal")
        return number
    if isinstance(field, models.BooleanField):
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if isinstance(field, models.IntegerField):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("expected an integer")
        if not INTEGER_MIN <= value <= INTEGER_MAX:
            raise ValueError("expected an integer a database column can hold (64 bits)")
        wide = isinstance(field, models.BigIntegerField | models.PositiveBigIntegerField)
        if not wide and not SMALL_INTEGER_MIN <= value <= SMALL_INTEGER_MAX:
            raise ValueError("expected an integer its column holds on every database (32 bits)")
        return value
    if isinstance(field, models.CharField | models.TextField):
        if not isinstance(value, str):
            raise ValueError("expected a string")
        return value
    return value  # JSONField: any JSON value
