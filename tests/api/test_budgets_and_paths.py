"""Usage, budgets, paths and reservations over HTTP (SPEC §19)."""

from __future__ import annotations

import pytest

from ledger.models import Event, EventType
from tests.api.conftest import assert_error, attempt_url, holder

pytestmark = pytest.mark.django_db


def _create(client, **fields) -> dict:
    created = client.post(
        "/api/v1/tasks/", {"project": "web", "title": "T", "status": "ready", **fields}, format="json"
    )
    assert created.status_code == 201, created.json()
    return created.json()


def test_budget_tokens_1000_renewals_600_then_500_exhaust_it(client, other_client):
    task = _create(client, budget_tokens=1000)
    assert (task["budget_tokens"], task["budget_cost_usd"], task["spent"]["input_tokens"]) == (1000, None, 0)
    claim = client.post(f"/api/v1/tasks/{task['key']}/claim/", {}, format="json").json()
    first = client.post(attempt_url(claim, "renew"), {"usage": {"input_tokens": 600}}, format="json", **holder(claim))
    assert first.status_code == 200
    second = client.post(
        attempt_url(claim, "renew"),
        {"usage": {"output_tokens": 500, "cost_usd": "0.5"}},
        format="json",
        **holder(claim),
    )
    error = assert_error(second, 409, "BUDGET_EXHAUSTED")
    assert error["retryable"] is False
    assert error["details"]["spent_tokens"] == 1100
    assert Event.objects.filter(type=EventType.BUDGET_WARNING).count() == 1
    note = client.post(
        attempt_url(claim, "notes"), {"kind": "progress", "content": "x"}, format="json", **holder(claim)
    )
    assert_error(note, 409, "BUDGET_EXHAUSTED")
    finished = client.post(
        attempt_url(claim, "finish"),
        {"outcome": "failed", "failure_reason_code": "other", "usage": {"cost_usd": 0.25}},
        format="json",
        **holder(claim),
    )
    assert finished.status_code == 200
    assert finished.json()["task"]["claimable"] is False  # the answer knows the budget is spent
    assert client.get(attempt_url(claim)).json()["spent"] == {
        "input_tokens": 600,
        "output_tokens": 500,
        "cost_usd": "0.750000",
    }
    shown = client.get(f"/api/v1/tasks/{task['key']}/").json()
    assert shown["spent"] == {"input_tokens": 600, "output_tokens": 500, "cost_usd": "0.750000"}
    refused = assert_error(
        other_client.post(f"/api/v1/tasks/{task['key']}/claim/", {}, format="json"), 409, "TASK_NOT_CLAIMABLE"
    )
    assert refused["details"]["reason"] == "budget"
    assert other_client.post("/api/v1/claims/next/", {"project": "web"}, format="json").status_code == 204


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"input_tokens": -5}, "input_tokens"),
        ({"cost_usd": "1.0000001"}, "cost_usd"),
        ({"cost_usd": "lots"}, "cost_usd"),
        ({"tokens": 1}, "tokens"),
    ],
)
def test_bad_usage_is_a_validation_error_naming_the_field(client, usage, field):
    task = _create(client)
    claim = client.post(f"/api/v1/tasks/{task['key']}/claim/", {}, format="json").json()
    error = assert_error(
        client.post(attempt_url(claim, "renew"), {"usage": usage}, format="json", **holder(claim)),
        400,
        "VALIDATION_ERROR",
    )
    assert field in str(error["details"])


def test_patch_sets_budget_and_paths(client):
    task = _create(client, paths=["./src//api/"])
    assert (task["paths"], task["paths_mode"]) == (["src/api"], "exclusive")
    patched = client.patch(
        f"/api/v1/tasks/{task['key']}/",
        {"budget_cost_usd": "2.5", "paths_mode": "shared"},
        format="json",
        HTTP_IF_MATCH=str(task["version"]),
    )
    assert patched.status_code == 200, patched.json()
    assert (patched.json()["budget_cost_usd"], patched.json()["paths_mode"]) == ("2.500000", "shared")
    bad = client.patch(
        f"/api/v1/tasks/{task['key']}/",
        {"paths": ["../etc"]},
        format="json",
        HTTP_IF_MATCH=str(patched.json()["version"]),
    )
    assert "paths" in assert_error(bad, 400, "VALIDATION_ERROR")["details"]["fields"]


def test_paths_reserved_reservations_list_and_context(client, other_client, clock):
    first = _create(client, paths=["src"])
    second = _create(client)
    claim = client.post(f"/api/v1/tasks/{first['key']}/claim/", {"lease_seconds": 60}, format="json").json()
    assert claim["context"]["reservation"] == {"paths": ["src"], "mode": "exclusive"}
    refused = other_client.post(f"/api/v1/tasks/{second['key']}/claim/", {"paths": ["src/app.py"]}, format="json")
    error = assert_error(refused, 409, "PATHS_RESERVED")
    assert (error["details"]["task"], error["details"]["paths"]) == (first["key"], ["src"])
    listed = client.get("/api/v1/reservations/?project=web").json()
    assert [(row["task"], row["paths"], row["mode"]) for row in listed["results"]] == [
        (first["key"], ["src"], "exclusive")
    ]
    assert listed["next_cursor"] is None
    context = client.get(f"/api/v1/tasks/{first['key']}/context/").json()
    assert context["reservation"]["paths"] == ["src"]
    clock.advance(61)  # the lease lapses: its reservation with it
    assert client.get("/api/v1/reservations/?project=web").json()["results"] == []
    assert (
        other_client.post(f"/api/v1/tasks/{second['key']}/claim/", {"paths": ["src/app.py"]}, format="json").status_code
        == 201
    )
