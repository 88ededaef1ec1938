from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from leases.models import Attempt, AttemptStatus
from leases.services import lease_claim
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_sweep_command_expires_lapsed_leases(clock):
    project = ProjectFactory(queue_wait_max_seconds=60)
    grant = lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]), lease_seconds=30)
    clock.advance(30)
    out = io.StringIO()
    call_command("sweep", stdout=out)
    assert out.getvalue().startswith("Expired 1 attempt(s) in 1 batch(es)")
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.EXPIRED


def test_check_queue_wait_command_reports_its_alerts(clock):
    TaskFactory(project=ProjectFactory(queue_wait_max_seconds=60))
    clock.advance(61)
    out = io.StringIO()
    call_command("check_queue_wait", stdout=out)
    assert out.getvalue().strip() == "Raised 1 queue-wait alert(s)."
