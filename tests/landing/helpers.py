"""Driving the landing API as agents and landers do."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from tests.api.conftest import client_for, holder

HEAD = "a" * 40


def head(n: int) -> str:
    return f"{n:040x}"


def deliver(agent: Any, key: str, *, commit: str = HEAD, pushed: bool | None = None) -> dict[str, Any]:
    """Claim `key` as `agent` and finish it done with git facts; returns the finish response's JSON."""
    client = client_for(agent)
    claim = client.post(f"/api/v1/tasks/{key}/claim/", {}, format="json")
    assert claim.status_code == 201, claim.content
    body = claim.json()
    git: dict[str, Any] = {"head_commit": commit}
    if pushed is not None:
        git["pushed"] = pushed
    finished = client.post(
        f"/api/v1/attempts/{body['attempt']['id']}/finish/",
        {"outcome": "done", "git": git},
        format="json",
        **holder(body),
    )
    return {"status": finished.status_code, "body": finished.json(), "claim": body}


def next_landing(client: APIClient, project: str = "web") -> dict[str, Any] | None:
    response = client.post("/api/v1/landings/next/", {"project": project}, format="json")
    if response.status_code == 204:
        return None
    assert response.status_code == 201, response.content
    return response.json()


def landing_headers(grant: dict[str, Any]) -> dict[str, str]:
    landing = grant["landing"]
    return {"HTTP_X_LEASE_TOKEN": landing["lease_token"], "HTTP_X_LEASE_EPOCH": str(landing["epoch"])}


def finish_landing(client: APIClient, grant: dict[str, Any], body: dict[str, Any]) -> Any:
    return client.post(
        f"/api/v1/landings/{grant['landing']['id']}/finish/", body, format="json", **landing_headers(grant)
    )
