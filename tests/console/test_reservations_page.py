"""Path reservations are visible (issue 32): a Reservations list, the paths on the attempt page, refusals evented."""

from __future__ import annotations

import pytest

from core.errors import PathsReserved
from leases.services import attempt_release, lease_claim
from ledger.models import EventType
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

RESERVATIONS = "/admin/leases/pathreservation/"


@pytest.fixture
def reserved():
    project = ProjectFactory(slug="web")
    holder = AgentFactory(handle="agent-07", projects=[project])
    asker = AgentFactory(handle="agent-09", projects=[project])
    live_task = TaskFactory(project=project, title="Rework the API", paths=["src/api"])
    ended_task = TaskFactory(project=project, title="Old docs", paths=["docs/<old>"])
    live = lease_claim(task=live_task, agent=holder)
    ended = lease_claim(task=ended_task, agent=asker)
    attempt_release(proof=proof_of(ended))
    return live, ended, asker


def test_the_list_shows_live_reservations_with_holder_task_and_paths(ops_client, reserved):
    live, ended, _ = reserved
    body = ops_client.get(RESERVATIONS).content.decode()
    assert live.task.key in body
    assert "agent-07" in body
    assert '<span class="lh-mono">src/api</span>' in body
    assert ended.task.key not in body  # its lease ended: it reserves nothing
    everything = ops_client.get(RESERVATIONS + "?live=all").content.decode()
    assert ended.task.key in everything
    assert "docs/&lt;old&gt;" in everything  # escaped
    assert "docs/<old>" not in everything
    only_ended = ops_client.get(RESERVATIONS + "?live=ended").content.decode()
    assert ended.task.key in only_ended
    assert live.task.key not in only_ended


def test_the_attempt_page_shows_its_paths(ops_client, reserved):
    live, ended, _ = reserved
    body = ops_client.get(f"/admin/leases/attempt/{live.attempt.pk}/change/").content.decode()
    assert "reserved paths" in body.lower()
    assert '<span class="lh-mono">src/api</span>' in body
    assert "exclusive, live" in body
    ended_body = ops_client.get(f"/admin/leases/attempt/{ended.attempt.pk}/change/").content.decode()
    assert "ended with the lease" in ended_body


def test_a_refusal_shows_in_the_refused_claims_list(ops_client, reserved):
    live, _, asker = reserved
    other = TaskFactory(project=live.task.project, title="Touches the API too")
    with pytest.raises(PathsReserved):
        lease_claim(task=other, agent=asker, paths=["src/api/views.py"])
    page = ops_client.get(RESERVATIONS).content.decode()
    refused = EventType.CLAIM_PATHS_REFUSED
    assert f"?type={refused}" in page
    events = ops_client.get(f"/admin/ledger/event/?type={refused}").content.decode()
    assert other.key in events
    assert str(refused) in events


def test_nobody_adds_or_changes_a_reservation(ops_client, reserved):
    live, _, _ = reserved
    assert ops_client.get(RESERVATIONS + "add/").status_code == 403
    page = ops_client.get(f"{RESERVATIONS}{live.attempt.pk}/change/")
    assert page.status_code == 200
    assert 'type="submit" value="Save"' not in page.content.decode()


def test_a_manager_reads_the_list(manager_client, reserved):
    live, _, _ = reserved
    assert live.task.key in manager_client.get(RESERVATIONS).content.decode()
