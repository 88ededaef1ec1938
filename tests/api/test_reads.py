"""Projects, work context budget, search, heartbeat, metrics."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.db import connection

from leases.context import encoded_size
from ledger.models import Agent
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_projects_are_listed_by_slug_with_a_cursor(client, agent):
    for slug in ("zeta", "alpha", "mid"):
        agent.projects.add(ProjectFactory(slug=slug))
    first = client.get("/api/v1/projects/?limit=2").json()
    assert [p["slug"] for p in first["results"]] == ["alpha", "mid"]
    second = client.get(f"/api/v1/projects/?limit=2&cursor={first['next_cursor']}").json()
    assert [p["slug"] for p in second["results"]] == ["web", "zeta"]
    assert second["next_cursor"] is None


def test_work_context_of_a_1_mb_description_stays_in_budget_and_names_the_cut(client, project, capsys):
    task = TaskFactory(project=project, description="x" * 1024 * 1024, acceptance_criteria="It works.")
    response = client.get(f"/api/v1/tasks/{task.key}/context/")
    assert response.status_code == 200
    body = response.json()
    assert encoded_size(body) <= settings.LEASEHOLD_CONTEXT_MAX_BYTES
    assert len(response.content) <= settings.LEASEHOLD_CONTEXT_MAX_BYTES
    assert "task.description" in body["truncated"]
    assert body["task"]["acceptance_criteria"] == "It works."
    with capsys.disabled():
        print(f"\nwork context of a 1 MB description: {len(response.content)} bytes")
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    assert encoded_size(claim.json()["context"]) <= settings.LEASEHOLD_CONTEXT_MAX_BYTES
    # The full read is the place for the whole description (bounded only by the request limit).
    assert len(client.get(f"/api/v1/tasks/{task.key}/").json()["description"]) == 1024 * 1024


def test_search_finds_tasks_and_notes_with_short_snippets(client, project):
    long_text = ("Padding words before the match. " * 200) + "The flaky migration breaks staging. " + ("tail " * 500)
    task = TaskFactory(project=project, title="Stabilise CI", description=long_text)
    other = TaskFactory(project=project, title="Unrelated", description="nothing here")
    claim = client.post(f"/api/v1/tasks/{other.key}/claim/", {}, format="json").json()
    client.post(
        attempt_url(claim, "notes"),
        {"kind": "finding", "content": "Found the migration that is flaky: 0042 locks a table."},
        format="json",
        **holder(claim),
    )
    results = client.get("/api/v1/search/?q=flaky migration").json()["results"]
    kinds = {(hit["kind"], hit["task"]) for hit in results}
    assert ("task", task.key) in kinds
    assert ("note", other.key) in kinds
    for hit in results:
        assert len(hit["snippet"]) <= 300
        assert "flaky" in hit["snippet"].lower() or "migration" in hit["snippet"].lower()
    note_hit = next(hit for hit in results if hit["kind"] == "note")
    assert note_hit["attempt"] == claim["attempt"]["id"]
    assert client.get("/api/v1/search/?q=zzzunfindable").json()["results"] == []


def test_search_in_a_huge_description_does_not_fail(client, project):
    TaskFactory(project=project, title="Huge", description="word%d " * 1 + " ".join(f"w{n}" for n in range(200_000)))
    response = client.get("/api/v1/search/?q=w5")
    assert response.status_code == 200
    assert all(len(hit["snippet"]) <= 300 for hit in response.json()["results"])


def test_search_pages_with_a_cursor(client, project):
    for number in range(5):
        TaskFactory(project=project, title=f"Parser bug {number}", description="parser crashes")
    first = client.get("/api/v1/search/?q=parser&limit=2").json()
    assert len(first["results"]) == 2
    second = client.get(f"/api/v1/search/?q=parser&limit=2&cursor={first['next_cursor']}").json()
    third = client.get(f"/api/v1/search/?q=parser&limit=2&cursor={second['next_cursor']}").json()
    keys = [hit["task"] for page in (first, second, third) for hit in page["results"]]
    assert sorted(keys) == sorted({*keys})
    assert len(keys) == 5
    assert third["next_cursor"] is None


def test_search_uses_full_text_search_on_postgresql(client, project):
    task = TaskFactory(project=project, title="Runner", description="The runners were running slowly.")
    hits = client.get("/api/v1/search/?q=run").json()["results"]
    if connection.vendor == "postgresql":
        assert [hit["task"] for hit in hits] == [task.key]  # stemming: run ~ running
        assert "**" in hits[0]["snippet"]
    else:
        assert [hit["task"] for hit in hits] == [task.key]  # substring fallback


def test_the_run_heartbeat_touches_last_seen_and_no_lease(client, agent, task, clock):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = client.post("/api/v1/agents/me/heartbeat/")
    assert response.status_code == 200
    assert response.json() == {"agent": agent.handle, "seen_at": "2026-01-05T09:00:00Z"}
    assert Agent.objects.get(pk=agent.pk).last_seen_at is not None
    detail = client.get(attempt_url(claim)).json()
    assert detail["renew_count"] == 0
    assert detail["lease_expires_at"] == claim["lease_expires_at"]


def test_metrics_per_day(client, other_client, task, clock):
    client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    assert_error(other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json"), 409, "TASK_TAKEN")
    other_client.patch(f"/api/v1/tasks/{task.key}/", {"status": "open"}, format="json", HTTP_IF_MATCH="1")
    body = client.get("/api/v1/metrics/?days=3").json()
    assert body["days"] == 3
    assert [day["day"] for day in body["claims"]] == ["2026-01-03", "2026-01-04", "2026-01-05"]
    assert body["claims"][-1]["value"] == 1
    assert body["lease_conflicts"][-1]["value"] == 2  # one refused claim + one contested write
    assert body["orphan_rate"][-1]["finished"] == 0
    assert_error(client.get("/api/v1/metrics/?days=0"), 400, "VALIDATION_ERROR")
    assert_error(client.get("/api/v1/metrics/?days=367"), 400, "VALIDATION_ERROR")


def test_metrics_are_scoped_to_the_agents_projects(client, project):
    from tests.api.conftest import client_for
    from tests.factories import AgentFactory

    secret = ProjectFactory(slug="secret")
    stranger_task = TaskFactory(project=secret)
    client_for(AgentFactory(projects=[secret])).post(f"/api/v1/tasks/{stranger_task.key}/claim/", {}, format="json")
    body = client.get("/api/v1/metrics/?days=1").json()
    assert body["claims"][-1]["value"] == 0
    assert json.dumps(body).count("secret") == 0
