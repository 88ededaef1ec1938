"""A real django-q2 cluster delivers webhooks to a real receiver (SPEC §18), on the test's database.

Real time (the cluster is another process): the schedule `ledger.deliver_webhooks`
is made due, the cluster started, and once a first event has arrived (the job
is following) a claim, a contested write and a finding must each reach the
receiver with a valid signature within 10 s of their commit.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule

from leases.models import Attempt
from leases.services import lease_claim, task_update
from ledger.actors import SYSTEM, Actor
from ledger.models import EventType
from operations.schedules import ensure_schedules
from push.services.webhooks import webhook_create
from reconciliation.services import reconcile
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.reconciliation.test_qcluster import start_cluster, stop_cluster
from tests.webhook_receiver import running_receiver

WITHIN_SECONDS = 10.0


def wait_for(receiver, event_type, *, seconds, cluster, log_path):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for request in receiver.delivered():
            if request.document["type"] == event_type:
                return request
        assert cluster.poll() is None, log_path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"no {event_type} within {seconds} s:\n{log_path.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_running_cluster_posts_a_claim_a_contested_write_and_a_finding_within_ten_seconds(tmp_path):
    project = ProjectFactory()
    holder = AgentFactory(projects=[project])
    other = AgentFactory(projects=[project])
    ensure_schedules()
    now = timezone.now()
    Schedule.objects.update(next_run=now + timedelta(days=1))
    Schedule.objects.filter(name="ledger.deliver_webhooks").update(next_run=now - timedelta(minutes=1))
    log_path = tmp_path / "qcluster.log"
    with running_receiver() as receiver:
        _, secret = webhook_create(
            url=receiver.url,
            project=project,
            event_types=[
                EventType.TASK_CREATED,
                EventType.ATTEMPT_CLAIMED,
                EventType.TASK_CONTESTED,
                EventType.FINDING_OPENED,
            ],
            actor=SYSTEM,
        )
        receiver.secrets.append(secret)
        cluster = start_cluster(log_path)
        try:
            TaskFactory(project=project)  # the first delivery: the job is running once it arrives
            wait_for(receiver, EventType.TASK_CREATED, seconds=60, cluster=cluster, log_path=log_path)

            started = time.monotonic()
            grant = lease_claim(task=TaskFactory(project=project), agent=holder, lease_seconds=600)
            claimed = wait_for(
                receiver, EventType.ATTEMPT_CLAIMED, seconds=WITHIN_SECONDS, cluster=cluster, log_path=log_path
            )
            assert claimed.at - started < WITHIN_SECONDS

            started = time.monotonic()
            task_update(task=grant.task, actor=Actor(agent=other), changes={"status": "blocked", "blocked_reason": "x"})
            contested = wait_for(
                receiver, EventType.TASK_CONTESTED, seconds=WITHIN_SECONDS, cluster=cluster, log_path=log_path
            )
            assert contested.at - started < WITHIN_SECONDS

            Attempt.objects.filter(pk=grant.attempt.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
            started = time.monotonic()
            reconcile()  # expired_lease_still_active
            found = wait_for(
                receiver, EventType.FINDING_OPENED, seconds=WITHIN_SECONDS, cluster=cluster, log_path=log_path
            )
            assert found.at - started < WITHIN_SECONDS
        finally:
            stop_cluster(cluster)
    assert all(request.valid for request in receiver.requests)
    assert claimed.document["attempt"] == grant.attempt.pk
    assert claimed.document["task"] == grant.task.key
    assert contested.document["severity"] == "warn"
