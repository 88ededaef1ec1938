from __future__ import annotations

import pytest

from landing.services import LandingSettings, project_set_landing
from ledger.actors import SYSTEM
from tests.factories import AgentFactory, ProjectFactory


@pytest.fixture
def project(db, clock):
    """A project with landing on: merge onto main, batches of one, no check."""
    project = ProjectFactory(slug="web", repository="/srv/web")
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    return project


@pytest.fixture
def agent(project):
    return AgentFactory(projects=[project])


@pytest.fixture
def lander(project):
    return AgentFactory(handle="lander-1", projects=[project])
