"""What work exists: projects, tasks, dependencies, agents and the event log.

Nothing here is ever hard-deleted (SPEC §1.6): `delete()` on these models and
their querysets raises, and the event table refuses UPDATE and DELETE at the
database level (triggers created by migration 0002).
"""

from __future__ import annotations

from ledger.models.agents import HANDLE_PATTERN, Agent, AgentKind
from ledger.models.base import DeletionRefused, NoDeleteModel, NoDeleteQuerySet
from ledger.models.discussion import (
    COMMENT_BODY_MAX_CHARS,
    DECISION_BODY_MAX_CHARS,
    DECISION_TITLE_MAX_CHARS,
    Decision,
    DecisionStatus,
    TaskComment,
)
from ledger.models.events import Event, EventType, Severity
from ledger.models.projects import (
    BATCH_MAX_LIMIT,
    BUDGET_COST_DIGITS,
    BUDGET_COST_HELP,
    BUDGET_TOKENS_HELP,
    CHECK_TIMEOUT_DEFAULT_SECONDS,
    Isolation,
    LandMethod,
    PathsMode,
    Project,
)
from ledger.models.tasks import (
    ALLOWED_TRANSITIONS,
    QUEUE_WAIT_UNALERTED,
    RESOLVED_STATUSES,
    Task,
    TaskDependency,
    TaskStatus,
)

__all__ = [
    "ALLOWED_TRANSITIONS",
    "BATCH_MAX_LIMIT",
    "BUDGET_COST_DIGITS",
    "BUDGET_COST_HELP",
    "BUDGET_TOKENS_HELP",
    "CHECK_TIMEOUT_DEFAULT_SECONDS",
    "COMMENT_BODY_MAX_CHARS",
    "DECISION_BODY_MAX_CHARS",
    "DECISION_TITLE_MAX_CHARS",
    "HANDLE_PATTERN",
    "QUEUE_WAIT_UNALERTED",
    "RESOLVED_STATUSES",
    "Agent",
    "AgentKind",
    "Decision",
    "DecisionStatus",
    "DeletionRefused",
    "Event",
    "EventType",
    "Isolation",
    "LandMethod",
    "NoDeleteModel",
    "NoDeleteQuerySet",
    "PathsMode",
    "Project",
    "Severity",
    "Task",
    "TaskComment",
    "TaskDependency",
    "TaskStatus",
]
