"""Every write to the ledger's own models, one module per subject. Doors import from here.

Each service runs in one transaction (`write_transaction`) and appends its
event inside it. Lease-aware rules (holder writes, contested writes) wrap
these in `leases.services`; doors call the outermost service.
"""

from __future__ import annotations

from ledger.services.agents import (
    LAST_SEEN_THROTTLE,
    ProjectsChanged,
    agent_create,
    agent_deactivate,
    agent_heartbeat,
    agent_pause,
    agent_reactivate,
    agent_resume,
    agent_rotate_token,
    agent_set_labels,
    agent_set_projects,
)
from ledger.services.budgets import budget_set
from ledger.services.dependencies import dependency_add, dependency_remove
from ledger.services.discussion import comment_add, decision_create, decision_supersede
from ledger.services.events import event_append, event_row
from ledger.services.plans import (
    MAX_PLAN_DECISIONS,
    MAX_PLAN_EDGES,
    MAX_PLAN_TASKS,
    PlannedDecision,
    PlannedTask,
    PlanResult,
    plan_apply,
    plan_check,
)
from ledger.services.projects import key_prefix_from_slug, project_create
from ledger.services.task_reservations import reservations_clear_for, task_reservation_clear
from ledger.services.tasks import (
    ACKNOWLEDGED_FIELDS,
    INITIAL_STATUSES,
    UPDATABLE_TASK_FIELDS,
    apply_task_update,
    check_status_transition,
    lock_task,
    task_create,
    tasks_wait_again,
    waiting_since,
)
from ledger.services.validation import validate_model

__all__ = [
    "ACKNOWLEDGED_FIELDS",
    "INITIAL_STATUSES",
    "LAST_SEEN_THROTTLE",
    "MAX_PLAN_DECISIONS",
    "MAX_PLAN_EDGES",
    "MAX_PLAN_TASKS",
    "UPDATABLE_TASK_FIELDS",
    "PlanResult",
    "PlannedDecision",
    "PlannedTask",
    "ProjectsChanged",
    "agent_create",
    "agent_deactivate",
    "agent_heartbeat",
    "agent_pause",
    "agent_reactivate",
    "agent_resume",
    "agent_rotate_token",
    "agent_set_labels",
    "agent_set_projects",
    "apply_task_update",
    "budget_set",
    "check_status_transition",
    "comment_add",
    "decision_create",
    "decision_supersede",
    "dependency_add",
    "dependency_remove",
    "event_append",
    "event_row",
    "key_prefix_from_slug",
    "lock_task",
    "plan_apply",
    "plan_check",
    "project_create",
    "reservations_clear_for",
    "task_create",
    "task_reservation_clear",
    "tasks_wait_again",
    "validate_model",
    "waiting_since",
]
