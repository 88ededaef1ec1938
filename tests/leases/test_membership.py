"""An agent removed from a project loses its leases there (issue 14, finding 9).

Chosen of the two ways the issue offers: the change of membership revokes the
agent's live attempts in the projects it lost, in the same transaction, with
`attempt.revoked` events; every later holder call answers LEASE_NOT_HELD.
"""

from __future__ import annotations

import pytest

from core.errors import LeaseNotHeld
from leases.models import Attempt, AttemptStatus
from leases.services import agent_set_projects, attempt_finish, attempt_renew, lease_claim, note_add
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def test_losing_a_project_revokes_the_leases_held_there_and_keeps_the_others(clock):
    web, docs = ProjectFactory(slug="web"), ProjectFactory(slug="docs")
    agent = AgentFactory(handle="agent-07", projects=[web, docs])
    in_web = lease_claim(task=TaskFactory(project=web), agent=agent)
    in_docs = lease_claim(task=TaskFactory(project=docs), agent=agent)

    agent_set_projects(agent=agent, projects=[docs], actor=SYSTEM)

    revoked = Attempt.objects.get(pk=in_web.attempt.pk)
    assert revoked.status == AttemptStatus.REVOKED
    assert revoked.revoke_reason == "agent-07 lost access to project web"
    assert Attempt.objects.get(pk=in_docs.attempt.pk).status == AttemptStatus.ACTIVE
    events = Event.objects.filter(type=EventType.ATTEMPT_REVOKED)
    assert [(event.attempt_id, event.payload["holder"]) for event in events] == [(in_web.attempt.pk, "agent-07")]
    for call in (
        lambda: attempt_renew(proof=proof_of(in_web)),
        lambda: note_add(proof=proof_of(in_web), kind="progress", content="still here"),
        lambda: attempt_finish(proof=proof_of(in_web), outcome="done"),
    ):
        with pytest.raises(LeaseNotHeld):
            call()
    assert attempt_renew(proof=proof_of(in_docs)).status == AttemptStatus.ACTIVE


def test_a_lapsed_lease_in_the_lost_project_is_expired_not_revoked(clock):
    web = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[web])
    grant = lease_claim(task=TaskFactory(project=web), agent=agent, lease_seconds=60)
    clock.advance(61)

    agent_set_projects(agent=agent, projects=[], actor=SYSTEM)

    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.EXPIRED
    assert not Event.objects.filter(type=EventType.ATTEMPT_REVOKED).exists()


def test_a_change_that_loses_no_project_revokes_nothing(clock):
    web, docs = ProjectFactory(slug="web"), ProjectFactory(slug="docs")
    agent = AgentFactory(projects=[web])
    grant = lease_claim(task=TaskFactory(project=web), agent=agent)

    agent_set_projects(agent=agent, projects=[web, docs], actor=SYSTEM)

    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE
