"""The project and the agent most lease tests start from; a module that needs others overrides them."""

from __future__ import annotations

import pytest

from tests.factories import AgentFactory, ProjectFactory


@pytest.fixture
def project():
    return ProjectFactory(slug="web")


@pytest.fixture
def agent(project):
    return AgentFactory(handle="agent-07", projects=[project])
