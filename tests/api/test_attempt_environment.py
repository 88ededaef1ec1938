"""A provider's sandbox, recorded on the allocation: `PUT /attempts/{id}/environment/` (SPEC §23.3)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from leases.models import Allocation, AllocationStatus
from ledger.models import Event, EventType
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import EnvironmentFactory

pytestmark = pytest.mark.django_db

MADE = {
    "database_url": "postgres://app@127.0.0.1:5432/lh_web_1",
    "ports": [8001, 8002],
    "container": "lh-web-1",
    "host_path": "/srv/sandboxes/web-1",
}


@pytest.fixture
def pool(project):
    return EnvironmentFactory(
        project=project,
        name="preview-a",
        kind="database",
        isolation="container",
        resources={"database_url": "postgres://app@db/catalogued", "rate_limit_key": "preview-a"},
    )


def _claim(client: APIClient, task, **body) -> dict:
    response = client.post(f"/api/v1/tasks/{task.key}/claim/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _put(client: APIClient, claim: dict, body: dict, **headers):
    return client.put(attempt_url(claim, "environment"), body, format="json", **headers)


def test_the_holder_records_what_was_made_and_the_context_carries_it(client, task, pool, clock):
    claim = _claim(client, task, environment_kind="database")
    assert claim["context"]["environment"]["resources"]["database_url"] == "postgres://app@db/catalogued"
    clock.advance(60)
    response = _put(client, claim, MADE, **holder(claim))
    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["environment"], answer["kind"], answer["provisioned"], answer["changed"]) == (
        "preview-a",
        "database",
        MADE,
        True,
    )
    assert answer["lease_expires_at"] > claim["lease_expires_at"]  # a holder write renews
    allocation = Allocation.objects.get(attempt_id=claim["attempt"]["id"])
    assert allocation.provisioned == MADE
    resources = client.get(f"/api/v1/tasks/{task.key}/context/").json()["environment"]["resources"]
    # The provider's values over the catalogue's; `container` reads as the catalogue's `container_name`.
    assert resources == {
        "database_url": MADE["database_url"],
        "ports": [8001, 8002],
        "container_name": "lh-web-1",
        "host_path": "/srv/sandboxes/web-1",
        "rate_limit_key": "preview-a",
    }
    (event,) = Event.objects.filter(type=EventType.ENVIRONMENT_PROVISIONED)
    assert event.attempt_id == claim["attempt"]["id"]
    assert event.payload == {"environment": "preview-a", "provisioned": MADE}
    # The same record again changes nothing and appends nothing.
    again = _put(client, claim, MADE, **holder(claim))
    assert again.json()["changed"] is False
    assert Event.objects.filter(type=EventType.ENVIRONMENT_PROVISIONED).count() == 1


def test_a_put_replaces_the_record_and_an_empty_one_clears_it(client, task, pool):
    claim = _claim(client, task, environment="preview-a")
    _put(client, claim, MADE, **holder(claim))
    assert _put(client, claim, {"host_path": "/srv/sandboxes/x", "ports": None}, **holder(claim)).json()[
        "provisioned"
    ] == {"host_path": "/srv/sandboxes/x"}
    assert _put(client, claim, {}, **holder(claim)).json()["provisioned"] == {}
    resources = client.get(f"/api/v1/tasks/{task.key}/context/").json()["environment"]["resources"]
    assert resources == pool.resources


def test_the_command_may_record_with_its_attempt_token(client, task, pool):
    claim = _claim(client, task, environment="preview-a")
    minted = client.post(attempt_url(claim, "token"), {}, format="json", **holder(claim)).json()["attempt_token"]
    command = APIClient()
    command.credentials(HTTP_AUTHORIZATION=f"Bearer {minted}")
    response = _put(command, claim, {"container": "lh-1"})
    assert response.status_code == 200, response.content
    assert Allocation.objects.get(attempt_id=claim["attempt"]["id"]).provisioned == {"container": "lh-1"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("database_url", "postgres://app:secret@db/x"),  # never a password
        ("database_url", "postgres://:@db/x"),
        ("database_url", "no scheme"),
        ("database_url", "postgres://db/x\n"),
        ("database_url", "postgres://db/" + "x" * 2000),
        ("database_url", 5),
        ("ports", [0]),
        ("ports", [65536]),
        ("ports", [True]),
        ("ports", "8000"),
        ("ports", list(range(1, 34))),
        ("container", ""),
        ("container", " lead"),
        ("container", "c" * 201),
        ("container", "a\x00b"),
        ("host_path", "relative/dir"),
        ("host_path", "/" + "p" * 500),
        ("rate_limit_key", "k"),
        ("token", "lh_x"),
    ],
)
def test_a_bad_or_unknown_field_is_a_validation_error_naming_it(client, task, pool, field, value):
    claim = _claim(client, task, environment="preview-a")
    error = assert_error(_put(client, claim, {field: value}, **holder(claim)), 400, "VALIDATION_ERROR")
    assert list(error["details"]["fields"]) == [field]
    assert Allocation.objects.get(attempt_id=claim["attempt"]["id"]).provisioned == {}


def test_a_lone_surrogate_is_a_validation_error(client, task, pool):
    claim = _claim(client, task, environment="preview-a")
    body = '{"container": "a\\ud800b"}'  # valid JSON, text no database can store
    response = client.put(attempt_url(claim, "environment"), body, content_type="application/json", **holder(claim))
    assert list(assert_error(response, 400, "VALIDATION_ERROR")["details"]["fields"]) == ["container"]


def test_an_attempt_without_an_environment_is_refused(client, task):
    claim = _claim(client, task)
    error = assert_error(_put(client, claim, MADE, **holder(claim)), 409, "ENVIRONMENT_UNAVAILABLE")
    assert error["details"]["reason"] == "not_allocated"


def test_only_the_live_holder_records(client, other_client, task, pool):
    claim = _claim(client, task, environment="preview-a")
    assert_error(_put(client, claim, MADE), 400, "VALIDATION_ERROR")  # no proof
    wrong = {"HTTP_X_LEASE_TOKEN": "x" * 43, "HTTP_X_LEASE_EPOCH": str(claim["epoch"])}
    assert_error(_put(client, claim, MADE, **wrong), 409, "INVALID_LEASE_TOKEN")
    assert_error(_put(other_client, claim, MADE, **holder(claim)), 404, "NOT_FOUND")
    finished = client.post(
        attempt_url(claim, "finish"), {"outcome": "done", "result_summary": "ok"}, format="json", **holder(claim)
    )
    assert finished.status_code == 200, finished.content
    assert_error(_put(client, claim, MADE, **holder(claim)), 409, "LEASE_NOT_HELD")
    allocation = Allocation.objects.get(attempt_id=claim["attempt"]["id"])
    assert (allocation.status, allocation.provisioned) == (AllocationStatus.RELEASED, {})


def test_the_record_outlives_the_release_of_the_allocation(client, task, pool):
    claim = _claim(client, task, environment="preview-a")
    _put(client, claim, MADE, **holder(claim))
    client.post(attempt_url(claim, "release"), {}, format="json", **holder(claim))
    allocation = Allocation.objects.get(attempt_id=claim["attempt"]["id"])
    assert (allocation.status, allocation.provisioned) == (AllocationStatus.RELEASED, MADE)
