"""SPEC §23.1 over HTTP: `requires` on task create, PATCH, plans, the full and compact task, the list filter,
and the refusal of a named claim by an agent without the labels."""

from __future__ import annotations

import pytest

from ledger.models import Task
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_requires_round_trips_through_create_read_list_and_patch(client, project):
    made = client.post(
        "/api/v1/tasks/", {"project": project.slug, "title": "Train", "status": "ready", "requires": ["gpu", "cuda"]},
        format="json",
    )  # fmt: skip
    assert made.status_code == 201, made.content
    key = made.json()["key"]
    assert made.json()["requires"] == ["gpu", "cuda"]
    assert client.get(f"/api/v1/tasks/{key}/").json()["requires"] == ["gpu", "cuda"]
    TaskFactory(project=project, title="Plain", status="ready")
    items = client.get("/api/v1/tasks/", {"project": project.slug}).json()["results"]
    assert {item["key"]: item["requires"] for item in items}[key] == ["gpu", "cuda"]
    assert all(item["claimable"] is (item["requires"] == []) for item in items)  # the client has no labels
    filtered = client.get("/api/v1/tasks/", {"requires": "gpu"}).json()["results"]
    assert [item["key"] for item in filtered] == [key]
    assert client.get("/api/v1/tasks/", {"requires": "gpu,tpu"}).json()["results"] == []
    assert_error(client.get("/api/v1/tasks/", {"requires": "GPU"}), 400, "VALIDATION_ERROR")

    version = client.get(f"/api/v1/tasks/{key}/").json()["version"]
    patched = client.patch(f"/api/v1/tasks/{key}/", {"requires": []}, format="json", HTTP_IF_MATCH=str(version))
    assert patched.status_code == 200, patched.content
    assert patched.json()["changed"] == ["requires"]
    assert Task.objects.get(key=key).requires == []


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        ("gpu", "not_a_list"),
        (["Gpu"], "invalid_label"),
        ([None], "invalid_label"),
        (["a", "a"], "duplicate_label"),
        ([f"l{n}" for n in range(21)], "too_many_labels"),
    ],
)
def test_bad_requires_are_a_validation_error_with_a_stable_reason(client, project, requires, reason):
    body = {"project": project.slug, "title": "Bad", "requires": requires}
    error = assert_error(client.post("/api/v1/tasks/", body, format="json"), 400, "VALIDATION_ERROR")
    assert error["details"]["reason"] == reason
    assert "requires" in error["details"]["fields"]
    task = TaskFactory(project=project)
    patch = client.patch(f"/api/v1/tasks/{task.key}/", {"requires": requires}, format="json", HTTP_IF_MATCH="1")
    assert assert_error(patch, 400, "VALIDATION_ERROR")["details"]["reason"] == reason
    assert not Task.objects.filter(title="Bad").exists()


def test_a_named_claim_without_the_labels_is_refused_with_the_missing_ones(client, project):
    task = TaskFactory(project=project, status="ready", requires=["gpu", "cuda"])
    error = assert_error(client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json"), 409, "TASK_NOT_CLAIMABLE")
    assert error["details"]["reason"] == "requires"
    assert error["details"]["missing"] == ["gpu", "cuda"]
    gpu = client_for(AgentFactory(projects=[project], labels=["cuda", "gpu"]))
    assert client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").status_code == 204
    claimed = gpu.post("/api/v1/claims/next/", {"project": project.slug}, format="json")
    assert claimed.status_code == 201, claimed.content
    assert claimed.json()["task"]["key"] == task.key
    assert claimed.json()["task"]["requires"] == ["gpu", "cuda"]


def test_a_plan_files_tasks_with_requires_and_names_a_bad_label_by_its_path(client, project):
    plan = {
        "project": project.slug,
        "tasks": [
            {"ref": "train", "title": "Train", "requires": ["gpu"]},
            {"ref": "docs", "title": "Docs", "blocked_by": ["train"]},
        ],
    }
    applied = client.post("/api/v1/plans/", plan, format="json")
    assert applied.status_code == 201, applied.content
    keys = applied.json()["keys"]
    assert Task.objects.get(key=keys["train"]).requires == ["gpu"]
    assert Task.objects.get(key=keys["docs"]).requires == []

    plan["tasks"][1]["requires"] = ["Not A Slug"]
    error = assert_error(client.post("/api/v1/plans/", plan, format="json"), 400, "VALIDATION_ERROR")
    assert [problem["path"] for problem in error["details"]["errors"]] == ["tasks[1].requires"]
    assert error["details"]["errors"][0]["ref"] == "docs"
