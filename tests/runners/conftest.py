from __future__ import annotations

import pytest

from ledger.actors import SYSTEM
from runners.models import Runner
from runners.services import runner_create
from tests.factories import ProjectFactory


@pytest.fixture
def project(db, clock):
    return ProjectFactory(slug="web", repository="/srv/web")


@pytest.fixture
def runner(project) -> Runner:
    """`gpu-box` with 2 slots and the `gpu` label; its token on `runner.api_token` (tests only)."""
    created, token = runner_create(name="gpu-box", projects=[project], slots=2, labels=["gpu"], actor=SYSTEM)
    created.api_token = token  # type: ignore[attr-defined]
    return created
