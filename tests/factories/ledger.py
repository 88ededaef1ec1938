"""The ledger's factories (projects, tasks, agents), built through its services, so every object carries its events."""

from __future__ import annotations

from typing import Any

import factory

from ledger.actors import SYSTEM
from ledger.models import Agent, AgentKind, Project, Task, TaskStatus
from ledger.services import agent_create, project_create, task_create


class ProjectFactory(factory.Factory):
    class Meta:
        model = Project

    slug = factory.Sequence(lambda n: f"proj{n}")
    name = factory.LazyAttribute(lambda o: f"Project {o.slug}")
    default_lease_seconds = 900

    @classmethod
    def _create(cls, model_class: type[Project], *args: Any, **kwargs: Any) -> Project:
        return project_create(actor=SYSTEM, **kwargs)


class TaskFactory(factory.Factory):
    class Meta:
        model = Task

    project = factory.SubFactory(ProjectFactory)
    title = factory.Sequence(lambda n: f"Task number {n}")
    status = TaskStatus.READY

    @classmethod
    def _create(cls, model_class: type[Task], *args: Any, **kwargs: Any) -> Task:
        return task_create(actor=SYSTEM, **kwargs)


class AgentFactory(factory.Factory):
    """Builds an agent; the raw API token is kept on `agent.api_token` for tests only."""

    class Meta:
        model = Agent

    handle = factory.Sequence(lambda n: f"agent-{n:02d}")
    kind = AgentKind.CLAUDE
    projects: Any = ()

    @classmethod
    def _create(cls, model_class: type[Agent], *args: Any, **kwargs: Any) -> Agent:
        agent, token = agent_create(actor=SYSTEM, **kwargs)
        agent.api_token = token  # type: ignore[attr-defined]
        return agent
