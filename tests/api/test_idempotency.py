"""Idempotency-Key: same key and request → the stored answer; another request → IDEMPOTENCY_CONFLICT."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from leases.idempotency import idempotency_purge
from leases.models import Attempt, IdempotencyRecord, Note
from ledger import clock as clock_module
from ledger.models import Event, EventType, Task
from tests.api.conftest import assert_error, attempt_url, client_for, holder
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory


@pytest.mark.django_db
def test_a_replayed_claim_answers_the_same_status_body_and_token(client, task):
    first = client.post(
        f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 120}, format="json", HTTP_IDEMPOTENCY_KEY="claim-1"
    )
    second = client.post(
        f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 120}, format="json", HTTP_IDEMPOTENCY_KEY="claim-1"
    )
    assert first.status_code == second.status_code == 201
    assert second.content == first.content  # byte for byte, token included
    assert second["Idempotent-Replayed"] == "true"
    assert Attempt.objects.filter(task=task).count() == 1
    assert Event.objects.filter(type=EventType.ATTEMPT_CLAIMED).count() == 1
    token = first.json()["lease_token"]
    record = IdempotencyRecord.objects.get(key="claim-1")
    assert token not in str(record.response)
    assert record.attempt_id == first.json()["attempt"]["id"]
    # The replayed token works.
    assert (
        client.post(attempt_url(second.json(), "renew"), {}, format="json", **holder(second.json())).status_code == 200
    )


@pytest.mark.django_db
def test_no_lease_token_is_stored_anywhere(client, task):
    body = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k").json()
    token = body["lease_token"]
    with connection.cursor() as cursor:
        for table in ("leases_idempotencyrecord", "leases_attempt", "ledger_event"):
            cursor.execute(f"SELECT * FROM {table}")
            assert token not in repr(cursor.fetchall()), table


@pytest.mark.django_db
def test_a_different_request_with_the_same_key_is_a_conflict(client, task, project):
    client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    other = TaskFactory(project=project)
    assert_error(
        client.post(f"/api/v1/tasks/{other.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k1"),
        409,
        "IDEMPOTENCY_CONFLICT",
    )
    assert_error(
        client.post(
            f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 60}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
        ),
        409,
        "IDEMPOTENCY_CONFLICT",
    )
    assert Attempt.objects.filter(task=other).count() == 0


@pytest.mark.django_db
def test_keys_are_per_agent(client, other_client, project):
    first, second = TaskFactory(project=project), TaskFactory(project=project)
    a = client.post(f"/api/v1/tasks/{first.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="same")
    b = other_client.post(f"/api/v1/tasks/{second.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="same")
    assert a.status_code == b.status_code == 201
    assert a.json()["attempt"]["id"] != b.json()["attempt"]["id"]


@pytest.mark.django_db
def test_holder_calls_replay_without_renewing_again(client, task, clock):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    note_body = {"kind": "checkpoint", "content": "once"}
    first = client.post(
        attempt_url(claim, "notes"), note_body, format="json", HTTP_IDEMPOTENCY_KEY="n1", **holder(claim)
    )
    clock.advance(10)
    again = client.post(
        attempt_url(claim, "notes"), note_body, format="json", HTTP_IDEMPOTENCY_KEY="n1", **holder(claim)
    )
    assert again.content == first.content
    assert Note.objects.count() == 1
    renew = client.post(attempt_url(claim, "renew"), {}, format="json", HTTP_IDEMPOTENCY_KEY="r1", **holder(claim))
    replay = client.post(attempt_url(claim, "renew"), {}, format="json", HTTP_IDEMPOTENCY_KEY="r1", **holder(claim))
    assert replay.content == renew.content
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).renew_count == 1
    # The same key with another token is another request.
    assert_error(
        client.post(
            attempt_url(claim, "renew"),
            {},
            format="json",
            HTTP_IDEMPOTENCY_KEY="r1",
            HTTP_X_LEASE_TOKEN="x",
            HTTP_X_LEASE_EPOCH="1",
        ),
        409,
        "IDEMPOTENCY_CONFLICT",
    )


@pytest.mark.django_db
def test_a_refusal_is_stored_and_replayed(client, other_client, task, clock):
    other_client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 60}, format="json")
    refused = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="c")
    assert_error(refused, 409, "TASK_TAKEN")
    clock.advance(61)  # now the claim would succeed, but the key already has its answer
    replay = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="c")
    assert replay.status_code == 409
    assert replay.content == refused.content
    assert (
        client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="c2").status_code == 201
    )


@pytest.mark.django_db
def test_invalid_input_does_not_take_the_key(client, task):
    bad = client.post(
        f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": "x"}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert_error(bad, 400, "VALIDATION_ERROR")
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_claim_next_with_nothing_left_replays_204(client, project):
    first = client.post("/api/v1/claims/next/", {"project": "web"}, format="json", HTTP_IDEMPOTENCY_KEY="n")
    TaskFactory(project=project)
    again = client.post("/api/v1/claims/next/", {"project": "web"}, format="json", HTTP_IDEMPOTENCY_KEY="n")
    assert first.status_code == again.status_code == 204
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", " ", "x" * 129, "with space", "tab\tkey", "ünï"])
def test_malformed_keys_are_refused(client, task, key):
    response = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert_error(response, 400, "VALIDATION_ERROR")


@pytest.mark.django_db
def test_task_create_and_update_are_idempotent(client, task):
    created = [
        client.post("/api/v1/tasks/", {"project": "web", "title": "Once"}, format="json", HTTP_IDEMPOTENCY_KEY="t")
        for _ in range(2)
    ]
    assert created[0].content == created[1].content
    assert Task.objects.filter(title="Once").count() == 1
    updates = [
        client.patch(
            f"/api/v1/tasks/{task.key}/", {"priority": 4}, format="json", HTTP_IF_MATCH="1", HTTP_IDEMPOTENCY_KEY="u"
        )
        for _ in range(2)
    ]
    assert updates[0].status_code == updates[1].status_code == 200
    assert updates[0].content == updates[1].content
    assert Task.objects.get(pk=task.pk).version == 2


@pytest.mark.django_db
def test_purge_removes_records_older_than_the_cutoff(client, task, clock):
    client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="old")
    clock.advance(25 * 3600)
    client.post("/api/v1/agents/me/heartbeat/", HTTP_IDEMPOTENCY_KEY="new")
    assert idempotency_purge() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]
    assert idempotency_purge(clock_module.now() + timedelta(seconds=1)) == 1
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["claim", "next"])
def test_concurrent_duplicates_do_the_work_once(path):
    project = ProjectFactory(slug="race")
    agent = AgentFactory(projects=[project])
    tasks = [TaskFactory(project=project) for _ in range(3)]
    url = f"/api/v1/tasks/{tasks[0].key}/claim/" if path == "claim" else "/api/v1/claims/next/"
    body = {} if path == "claim" else {"project": "race"}

    def send(index: int):
        response = client_for(agent).post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="dup")
        return response.status_code, response.content

    results = run_in_threads(8, send)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    assert {status for status, _ in results} == {201}
    assert len({content for _, content in results}) == 1  # one answer, one token
    assert Attempt.objects.count() == 1
    assert Event.objects.filter(type=EventType.ATTEMPT_CLAIMED).count() == 1
    assert IdempotencyRecord.objects.count() == 1


@pytest.mark.django_db
def test_a_refusal_keeps_what_the_service_committed_before_refusing(client, other_client, task, clock):
    """LEASE_EXPIRED under a key still expires the attempt; TASK_TAKEN under a key is still tallied."""
    from leases.models import AttemptStatus, ClaimRefusalTally

    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {"lease_seconds": 60}, format="json").json()
    taken = other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json", HTTP_IDEMPOTENCY_KEY="t")
    assert_error(taken, 409, "TASK_TAKEN")
    assert sum(ClaimRefusalTally.objects.values_list("count", flat=True)) == 1
    clock.advance(61)
    late = client.post(attempt_url(claim, "renew"), {}, format="json", HTTP_IDEMPOTENCY_KEY="r", **holder(claim))
    assert_error(late, 409, "LEASE_EXPIRED")
    assert Attempt.objects.get(pk=claim["attempt"]["id"]).status == AttemptStatus.EXPIRED
    assert Event.objects.filter(type=EventType.ATTEMPT_EXPIRED).count() == 1
    replay = client.post(attempt_url(claim, "renew"), {}, format="json", HTTP_IDEMPOTENCY_KEY="r", **holder(claim))
    assert replay.content == late.content


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_notes_write_one_note():
    project = ProjectFactory(slug="notes")
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    claim = client_for(agent).post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()

    def send(index: int):
        response = client_for(agent).post(
            attempt_url(claim, "notes"),
            {"kind": "checkpoint", "content": "exactly once"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="note-dup",
            **holder(claim),
        )
        return response.status_code, response.content

    results = run_in_threads(8, send)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert {status for status, _ in results} == {201}
    assert len({content for _, content in results}) == 1
    assert Note.objects.count() == 1
    assert Event.objects.filter(type=EventType.NOTE_ADDED).count() == 1
