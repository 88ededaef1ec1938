from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import AgentFactory, ProjectFactory, TaskFactory


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent.api_token}")
    return client


def holder(claim: dict) -> dict[str, str]:
    """The holder headers for a claim response."""
    return {"HTTP_X_LEASE_TOKEN": claim["lease_token"], "HTTP_X_LEASE_EPOCH": str(claim["epoch"])}


def attempt_url(claim: dict, action: str = "") -> str:
    suffix = f"{action}/" if action else ""
    return f"/api/v1/attempts/{claim['attempt']['id']}/{suffix}"


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "retryable", "details"}
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


@pytest.fixture
def project(db, clock):
    return ProjectFactory(slug="web")


@pytest.fixture
def agent(project):
    return AgentFactory(projects=[project])


@pytest.fixture
def other_agent(project):
    return AgentFactory(projects=[project])


@pytest.fixture
def client(agent) -> APIClient:
    return client_for(agent)


@pytest.fixture
def other_client(other_agent) -> APIClient:
    return client_for(other_agent)


@pytest.fixture
def task(project):
    return TaskFactory(project=project, title="Fix the search copy", description="The search page says 'Serach'.")


def pytest_collection_modifyitems(items):
    # WhiteNoise warns once per client that the collected static dir is absent; irrelevant here.
    for item in items:
        if "tests/api/" in str(item.path):
            item.add_marker(pytest.mark.filterwarnings("ignore:No directory at:UserWarning"))


# The compact task item's fields (SPEC §8): lists, graphs and finishes answer exactly these.
COMPACT_KEYS = {
    "key",
    "title",
    "status",
    "effective_status",
    "priority",
    "task_class",
    "requires",  # SPEC §23.1: what a claimer must carry, so an agent sees why a task is not claimable for it
    "version",
    "epoch",
    "holder",
    "lease_expires_at",
    "blocked_by",
    "claimable",
}
