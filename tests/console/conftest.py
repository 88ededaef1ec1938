"""Fixtures for the admin tests: users in each role, and a small fleet with a live lease."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group

from leases.services import LeaseGrant, lease_claim
from ledger.models import Agent, Project, Task
from ledger.permissions import LEDGER_ADMINS, MANAGERS
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

PASSWORD = "pw-for-tests"


def make_staff(django_user_model, username: str, group: str | None, *, superuser: bool = False):
    if superuser:
        return django_user_model.objects.create_superuser(username=username, password=PASSWORD)
    user = django_user_model.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def ledger_admin(django_user_model):
    return make_staff(django_user_model, "ops", LEDGER_ADMINS)


@pytest.fixture
def manager(django_user_model):
    return make_staff(django_user_model, "boss", MANAGERS)


@pytest.fixture
def ops_client(client, ledger_admin):
    client.force_login(ledger_admin)
    return client


@pytest.fixture
def manager_client(client, manager):
    client.force_login(manager)
    return client


@dataclass
class Fleet:
    project: Project
    holder: Agent
    other: Agent
    held: Task
    idle: Task
    grant: LeaseGrant


@pytest.fixture
def fleet() -> Fleet:
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    other = AgentFactory(handle="agent-09", projects=[project])
    held = TaskFactory(project=project, title="Fix the search copy")
    idle = TaskFactory(project=project, title="Tidy the footer")
    grant = lease_claim(task=held, agent=holder)
    return Fleet(project=project, holder=holder, other=other, held=held, idle=idle, grant=grant)
