"""Project membership, knowing about leases: an agent that loses a project loses its leases there.

`ledger.services.agent_set_projects` changes who sees what; this wraps it in
the same transaction and revokes the agent's active attempts in the projects
it lost (`attempt.revoked`, reason "lost access to project <slug>"), so its
next holder write answers `LEASE_NOT_HELD` and it can neither renew nor
finish a task it can no longer see. A lapsed one is expired instead, as
force-release does. Its stored Idempotency-Key answers are voided too, so a
replay cannot hand it a lost project's task again. Doors call this one.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.db import write_transaction
from leases.idempotency import idempotency_void
from leases.models import Attempt, AttemptStatus
from leases.services.revoke import task_force_release
from ledger.actors import Actor
from ledger.models import Agent, Project
from ledger.services import ProjectsChanged
from ledger.services import agent_set_projects as ledger_agent_set_projects


@write_transaction
def agent_set_projects(*, agent: Agent, projects: Iterable[Project], actor: Actor) -> ProjectsChanged:
    """Make `projects` exactly the agent's projects; revoke its leases in the projects it lost."""
    changed = ledger_agent_set_projects(agent=agent, projects=projects, actor=actor)
    if changed.removed:
        idempotency_void(changed.agent)
        held = Attempt.objects.filter(
            agent=changed.agent, status=AttemptStatus.ACTIVE, task__project__slug__in=changed.removed
        ).select_related("task__project")
        for attempt in list(held):
            task_force_release(
                task=attempt.task,
                actor=actor,
                reason=f"{agent.handle} lost access to project {attempt.task.project.slug}",
            )
    return changed
