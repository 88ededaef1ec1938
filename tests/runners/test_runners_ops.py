"""Runners as operators meet them: the commands, /metrics, the lost job, webhooks for `runner.lost`."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType
from ledger.tokens import hash_token
from push.models import WebhookDelivery
from runners.jobs import mark_lost_runners_job
from runners.models import Runner, RunnerSlot, SlotState
from runners.services import SlotReport, runner_heartbeat, runner_register
from tests.factories import WebhookEndpointFactory

pytestmark = pytest.mark.django_db

METRICS_TOKEN = "metrics-token-for-tests-0123456789"


def test_create_runner_prints_the_token_once_on_the_last_line(project):
    out = io.StringIO()
    call_command("create_runner", "ci-1", "--project", "web", "--slots", "3", "--labels", "gpu, postgres", stdout=out)
    lines = out.getvalue().strip().splitlines()
    runner = Runner.objects.get(name="ci-1")
    assert runner.token_hash == hash_token(lines[-1])
    assert lines[-1].startswith("lhr_")
    assert out.getvalue().count("lhr_") == 1
    assert runner.labels == ["gpu", "postgres"]
    assert sorted(Agent.objects.filter(runner_slot__runner=runner).values_list("handle", flat=True)) == [
        "ci-1.1",
        "ci-1.2",
        "ci-1.3",
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        ["ci-1", "--project", "nope", "--slots", "2"],
        ["ci-1", "--slots", "2"],
        ["ci-1", "--project", "web", "--slots", "0"],
        ["Bad Name", "--project", "web", "--slots", "1"],
        ["ci-1", "--project", "web", "--slots", "1", "--labels", "GPU!"],
    ],
)
def test_create_runner_refuses_bad_arguments_and_creates_nothing(project, arguments):
    with pytest.raises(CommandError):
        call_command("create_runner", *arguments, stdout=io.StringIO())
    assert not Runner.objects.exists()


def test_rotate_runner_token_replaces_it(runner):
    out = io.StringIO()
    call_command("rotate_runner_token", "gpu-box", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    runner.refresh_from_db()
    assert runner.token_hash == hash_token(token) != hash_token(runner.api_token)
    with pytest.raises(CommandError):
        call_command("rotate_runner_token", "nobody", stdout=io.StringIO())


def test_the_lost_job_marks_once_and_a_webhook_subscribed_to_runner_lost_gets_it(runner, clock):
    endpoint = WebhookEndpointFactory(event_types=[EventType.RUNNER_LOST])
    runner_register(runner=runner, host="h", version="v", pid=1, actor=SYSTEM)
    clock.advance(50)
    assert mark_lost_runners_job() == {"lost": ["gpu-box"]}
    assert mark_lost_runners_job() == {"lost": []}
    lost = Event.objects.get(type=EventType.RUNNER_LOST)
    assert list(WebhookDelivery.objects.filter(endpoint=endpoint).values_list("event_id", flat=True)) == [lost.pk]


def _scrape(settings) -> dict:
    settings.LEASEHOLD_METRICS_TOKEN = METRICS_TOKEN
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_runners_online_and_offline_slots_busy_and_idle_and_missed_heartbeats(
    runner, project, clock, settings
):
    from runners.services import runner_create

    runner_create(name="never-seen", projects=[project], slots=1, actor=SYSTEM)
    runner_register(runner=runner, host="h", version="v", pid=1, actor=SYSTEM)
    runner_heartbeat(runner=runner, slots=[SlotReport(number=1, state=SlotState.WORKING, attempt_id=5)])
    clock.advance(31)
    samples = _scrape(settings)
    assert samples[("leasehold_runners", (("status", "online"),))] == 1
    assert samples[("leasehold_runners", (("status", "offline"),))] == 1
    assert samples[("leasehold_runner_slots", (("state", "busy"),))] == 1
    assert samples[("leasehold_runner_slots", (("state", "idle"),))] == 1
    assert samples[("leasehold_runner_heartbeats_missed", (("runner", "gpu-box"),))] == 2
    clock.advance(30)
    samples = _scrape(settings)
    assert samples[("leasehold_runners", (("status", "online"),))] == 0
    assert samples[("leasehold_runner_slots", (("state", "busy"),))] == 0
    assert RunnerSlot.objects.filter(state=SlotState.WORKING).count() == 1
