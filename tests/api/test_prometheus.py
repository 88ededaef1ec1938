"""`GET /metrics` (SPEC §18): Prometheus text that parses, values that match the database, and who may scrape."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from leases.models import Attempt, AttemptStatus, ClaimRefusalTally
from leases.selectors import with_lease_state
from leases.services import attempt_finish, attempt_release, lease_claim, sweep_expired, task_update
from ledger.actors import Actor
from ledger.models import Event, EventType, Task
from reconciliation.models import Finding, ReconciliationRun
from reconciliation.services import reconcile
from tests.factories import AgentFactory, ProjectFactory, TaskFactory, WebhookEndpointFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-for-tests-0123456789"


@pytest.fixture(autouse=True)
def _token(settings):
    settings.LEASEHOLD_METRICS_TOKEN = TOKEN


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = (client or Client()).get("/metrics", headers=headers or {"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def fleet(clock):
    web, api = ProjectFactory(slug="web"), ProjectFactory(slug="api")
    agents = [AgentFactory(projects=[web, api]) for _ in range(3)]
    tasks = [TaskFactory(project=web) for _ in range(6)] + [TaskFactory(project=api, status="open") for _ in range(2)]
    long = lease_claim(task=tasks[0], agent=agents[0], lease_seconds=3600)
    lease_claim(task=tasks[1], agent=agents[1], lease_seconds=300)  # expiring within 10 minutes
    done = lease_claim(task=tasks[2], agent=agents[2], lease_seconds=600)
    attempt_finish(proof=proof_of(done), outcome="done")
    failed = lease_claim(task=tasks[3], agent=agents[2], lease_seconds=600)
    attempt_finish(proof=proof_of(failed), outcome="failed", failure_reason_code="implementation_error")
    released = lease_claim(task=tasks[4], agent=agents[2], lease_seconds=600)
    attempt_release(proof=proof_of(released))
    lapsing = lease_claim(task=tasks[5], agent=agents[2], lease_seconds=60)
    task_update(task=tasks[0], actor=Actor(agent=agents[1]), changes={"status": "blocked", "blocked_reason": "x"})
    ClaimRefusalTally.objects.create(day=clock.now().date(), project=web, agent=agents[1], count=3)
    WebhookEndpointFactory(event_types=[EventType.ATTEMPT_CLAIMED])
    lease_claim(task=TaskFactory(project=web), agent=agents[2], lease_seconds=3600)
    clock.advance(120)
    sweep_expired()
    return {"web": web, "api": api, "long": long, "lapsing": lapsing}


def test_the_scrape_parses_and_every_value_matches_the_database(clock, fleet):
    samples = scrape()
    now = clock.now()
    for project in (fleet["web"], fleet["api"]):
        annotated = with_lease_state(Task.objects.filter(project=project), now=now)
        expected: dict[str, int] = {}
        for status in annotated.values_list("effective_status", flat=True):
            expected[status] = expected.get(status, 0) + 1
        for status in ["open", "ready", "blocked", "review", "done", "cancelled", "in_progress"]:
            key = ("leasehold_tasks", (("effective_status", status), ("project", project.slug)))
            assert samples[key] == expected.get(status, 0), (project.slug, status)
    live = Attempt.objects.filter(status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
    assert samples[("leasehold_live_leases", ())] == live.count() == 3
    soon = live.filter(lease_expires_at__lte=now + timedelta(minutes=10)).count()
    assert samples[("leasehold_leases_expiring_soon", ())] == soon == 1
    assert samples[("leasehold_claims_total", ())] == Event.objects.filter(type=EventType.ATTEMPT_CLAIMED).count() == 7
    assert samples[("leasehold_contested_writes_total", ())] == 1
    assert samples[("leasehold_lease_conflicts_total", ())] == 3 + 1
    finished = {
        status: samples[("leasehold_attempts_finished_total", (("status", status),))]
        for status in ["completed", "failed", "released", "expired", "revoked", "interrupted"]
    }
    assert finished == {
        status: Attempt.objects.filter(status=status).count()
        for status in ["completed", "failed", "released", "expired", "revoked", "interrupted"]
    }
    assert finished["expired"] == 1
    assert finished["completed"] == finished["failed"] == finished["released"] == 1
    assert samples[("leasehold_expiries_total", ())] == 1
    assert samples[("leasehold_webhook_deliveries", (("status", "pending"),))] == 1
    assert samples[("leasehold_last_reconciliation_timestamp_seconds", ())] == 0


def test_counters_only_grow_and_count_each_event_once(clock, fleet):
    first = scrape()[("leasehold_claims_total", ())]
    assert scrape()[("leasehold_claims_total", ())] == first  # a second scrape counts nothing twice
    lease_claim(task=TaskFactory(project=fleet["web"]), agent=AgentFactory(projects=[fleet["web"]]))
    assert scrape()[("leasehold_claims_total", ())] == first + 1


def test_leases_expiring_soon_and_the_oldest_queue_wait(clock):
    project = ProjectFactory(slug="q")
    agent = AgentFactory(projects=[project])
    waiting = TaskFactory(project=project)
    clock.advance(100)
    TaskFactory(project=project)
    lease_claim(task=waiting, agent=agent, lease_seconds=300)  # the oldest is held: it no longer waits
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    clock.advance(50)
    samples = scrape()
    assert samples[("leasehold_leases_expiring_soon", ())] == 1
    assert samples[("leasehold_live_leases", ())] == 2
    assert samples[("leasehold_queue_wait_oldest_seconds", (("project", "q"),))] == 50


def test_only_the_metrics_token_or_a_staff_session_may_scrape(admin_client, fleet):
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    agent = AgentFactory(projects=[fleet["web"]])
    assert Client().get("/metrics", headers={"Authorization": f"Bearer {agent.api_token}"}).status_code == 401
    assert ("leasehold_live_leases", ()) in scrape(admin_client, **{})


def test_open_findings_by_condition(clock, fleet):
    Attempt.objects.filter(pk=fleet["long"].attempt.pk).update(lease_expires_at=clock.now() - timedelta(seconds=1))
    reconcile()  # expired_lease_still_active, at least
    samples = scrape()
    conditions = set(Finding.objects.exclude(status="resolved").values_list("condition", flat=True))
    assert "expired_lease_still_active" in conditions
    for condition in conditions:
        expected = Finding.objects.exclude(status="resolved").filter(condition=condition).count()
        assert samples[("leasehold_open_findings", (("condition", condition),))] == expected
    assert samples[("leasehold_last_reconciliation_timestamp_seconds", ())] > 0
    run = ReconciliationRun.objects.order_by("-id").first()
    assert samples[("leasehold_last_reconciliation_errors", ())] == len(run.errors)


def test_spend_and_the_job_heartbeats_are_served_from_the_database(clock):
    from decimal import Decimal

    from insight.models.job_heartbeat import JobName, JobOutcome
    from insight.services.job_heartbeat import job_finished, job_started
    from leases.models import ProjectDailyUsage

    web = ProjectFactory(slug="spendy")
    today = clock.now().date()
    ProjectDailyUsage.objects.create(
        project=web,
        day=today - timedelta(days=1),
        input_tokens=100,
        output_tokens=20,
        cost_usd=Decimal("1.5"),
        updated_at=clock.now(),
    )
    ProjectDailyUsage.objects.create(
        project=web, day=today, input_tokens=7, output_tokens=3, cost_usd=Decimal("0.25"), updated_at=clock.now()
    )
    before = scrape()
    assert before[("leasehold_last_sweep_timestamp_seconds", ())] == 0
    assert before[("leasehold_spent_tokens_total", (("project", "spendy"),))] == 130
    assert before[("leasehold_spent_cost_usd_total", (("project", "spendy"),))] == 1.75
    assert before[("leasehold_spent_tokens_today", (("project", "spendy"),))] == 10
    assert before[("leasehold_spent_cost_usd_today", (("project", "spendy"),))] == 0.25

    started = job_started(name=JobName.SWEEP)
    clock.advance(2)
    job_finished(name=JobName.SWEEP, outcome=JobOutcome.SUCCEEDED, result={})
    after = scrape()
    assert after[("leasehold_scheduler_heartbeat_timestamp_seconds", ())] == started.timestamp()
    assert after[("leasehold_last_sweep_timestamp_seconds", ())] == clock.now().timestamp()


def test_a_task_held_by_a_reviewer_is_scraped_as_in_review(clock):
    from leases.services.review_claims import review_claim_next

    project = ProjectFactory(slug="rev")
    worker, reviewer = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    work = lease_claim(task=TaskFactory(project=project), agent=worker)
    attempt_finish(proof=proof_of(work), outcome="review")
    assert review_claim_next(project=project, agent=reviewer) is not None
    samples = scrape()
    assert samples[("leasehold_tasks", (("effective_status", "in_review"), ("project", "rev")))] == 1
    assert samples[("leasehold_tasks", (("effective_status", "review"), ("project", "rev")))] == 0
    assert samples[("leasehold_tasks", (("effective_status", "in_progress"), ("project", "rev")))] == 0
