"""Fixtures for the agent toolkit's tests: one live server for the session, an agent on it.

These are not Django database tests: the server is a separate process with
its own SQLite file, reached over HTTP only.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.client import LeaseholdClient
from tests.agent.live import LiveServer, agent_env

PROJECT = "agt"
_titles = itertools.count(1)


@dataclass
class Fleet:
    """The live server, the project and one agent's token on it."""

    server: LiveServer
    project: str
    token: str

    def client(self, **options) -> LeaseholdClient:
        return LeaseholdClient(self.server.url, self.token, **options)

    def ready_task(self, *, task_class: str = "") -> str:
        with self.client() as api:
            task = api.create_task(
                self.project, f"Agent test task {next(_titles)}", status="ready", task_class=task_class
            )
        return str(task["key"])


@pytest.fixture(scope="session")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    server = LiveServer(tmp_path_factory.mktemp("leasehold-live"), on_suite_database=True).start()
    try:
        server.manage("create_project", PROJECT, "--name", "Agent toolkit tests")
        token = server.create_agent("toolkit-1", project=PROJECT)
        yield Fleet(server=server, project=PROJECT, token=token)
    finally:
        server.stop()


@pytest.fixture
def api(fleet) -> Iterator[LeaseholdClient]:
    with fleet.client() as client:
        yield client


@pytest.fixture
def logged_in(fleet, tmp_path) -> dict[str, str]:
    """A `leasehold` environment whose config file names the live server and the agent's token."""
    env = agent_env(tmp_path)
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700)
    config.write_text(json.dumps({"url": fleet.server.url, "token": fleet.token, "project": fleet.project}))
    config.chmod(0o600)
    return env
