"""Reads of the ledger's own models that are more than a `get()`."""

from __future__ import annotations

import hmac

from django.db.models import QuerySet

from config.errors import NotFound
from ledger.models import Agent, Project, Task, TaskDependency
from ledger.tokens import AGENT_TOKEN_PREFIX, hash_token


def agent_for_token(token: str) -> Agent | None:
    """The active agent whose API token this is, or None.

    Looked up by the token's SHA-256 (unique index), then compared in constant
    time as a second guard.
    """
    if not token.startswith(AGENT_TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    agent = Agent.objects.filter(token_hash=digest, is_active=True).first()
    if agent is None or not hmac.compare_digest(agent.token_hash, digest):
        return None
    return agent


def projects_visible_to(agent: Agent) -> QuerySet[Project]:
    return Project.objects.filter(agents=agent).order_by("slug")


def project_by_slug(slug: str, *, agent: Agent | None = None) -> Project:
    """The project, or NOT_FOUND — also when the agent may not see it."""
    projects = Project.objects.all() if agent is None else projects_visible_to(agent)
    project = projects.filter(slug=slug).first()
    if project is None:
        raise NotFound(f"No project {slug!r}.", details={"project": slug})
    return project


def task_by_key(key: str, *, agent: Agent | None = None) -> Task:
    """The task, or NOT_FOUND — also when it belongs to a project the agent may not see."""
    tasks = Task.objects.select_related("project")
    if agent is not None:
        tasks = tasks.filter(project__agents=agent)
    task = tasks.filter(key=key).first()
    if task is None:
        raise NotFound(f"No task {key!r}.", details={"task": key})
    return task


def active_dependencies() -> QuerySet[TaskDependency]:
    return TaskDependency.objects.filter(removed_at__isnull=True)
