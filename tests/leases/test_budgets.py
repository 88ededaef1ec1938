"""Usage totals and budgets (SPEC §19): the 80 % warning once, the 100 % stop, finish still works."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core.errors import BudgetExhausted, PermissionDenied, TaskNotClaimable, ValidationFailed
from leases.models import AgentDailyUsage, AttemptUsage, ProjectDailyUsage, TaskUsage
from leases.selectors import claimable_tasks
from leases.services import (
    attempt_finish,
    attempt_renew,
    attempt_set_git,
    lease_claim,
    lease_claim_next,
    note_add,
    task_update,
)
from leases.services.usage import validate_usage
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.services import budget_set
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def _events(kind: str) -> list[Event]:
    return list(Event.objects.filter(type=kind).order_by("id"))


def test_task_budget_warns_once_stops_holder_writes_and_finish_still_works(clock):
    task = TaskFactory(budget_tokens=1000)
    agent = AgentFactory(projects=[task.project])
    grant = lease_claim(task=task, agent=agent)
    proof = proof_of(grant)

    attempt_renew(proof=proof, usage={"input_tokens": 400, "output_tokens": 200})
    assert _events(EventType.BUDGET_WARNING) == []
    with pytest.raises(BudgetExhausted) as refused:
        attempt_renew(proof=proof, usage={"input_tokens": 500})
    assert refused.value.details["scope"] == "task"
    assert refused.value.details["spent_tokens"] == 1100
    assert refused.value.http_status == 409
    assert not refused.value.retryable

    warnings = _events(EventType.BUDGET_WARNING)
    assert len(warnings) == 1
    assert warnings[0].severity == "warn"
    assert warnings[0].payload["scope"] == "task"
    assert warnings[0].task_id == task.pk
    assert len(_events(EventType.BUDGET_EXHAUSTED)) == 1
    # The refused call's usage was spent: it is counted.
    assert TaskUsage.objects.get(task=task).input_tokens == 900
    # Every other holder write is refused too, and repeats write no second warning.
    with pytest.raises(BudgetExhausted):
        note_add(proof=proof, kind="progress", content="still going")
    with pytest.raises(BudgetExhausted):
        attempt_set_git(proof=proof, dirty=True)
    with pytest.raises(BudgetExhausted):
        task_update(task=task, actor=SYSTEM.__class__(agent=agent), changes={"priority": 3}, proof=proof)
    assert len(_events(EventType.BUDGET_WARNING)) == 1

    finished = attempt_finish(
        proof=proof, outcome="failed", failure_reason_code="other", usage={"output_tokens": 10, "cost_usd": "0.25"}
    )
    assert finished.attempt.status == "failed"
    usage = AttemptUsage.objects.get(attempt=grant.attempt)
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (900, 210, Decimal("0.25"))

    # Not claimable any more: a named claim says why, claim-next walks past it.
    with pytest.raises(TaskNotClaimable) as not_claimable:
        lease_claim(task=task, agent=agent)
    assert not_claimable.value.details["reason"] == "budget"
    assert not claimable_tasks(project=task.project, now=clock.now()).filter(pk=task.pk).exists()
    assert lease_claim_next(project=task.project, agent=agent) is None


def test_usage_is_summed_per_attempt_task_agent_day_and_project_day(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    first, second = TaskFactory(project=project), TaskFactory(project=project)
    one = lease_claim(task=first, agent=agent)
    two = lease_claim(task=second, agent=agent, lease_seconds=86400)
    note_add(proof=proof_of(one), kind="progress", content="x", usage={"input_tokens": 5, "cost_usd": 0.1})
    attempt_set_git(proof=proof_of(two), dirty=False, usage={"output_tokens": 7, "cost_usd": "0.000001"})
    day = clock.now().date()
    assert AttemptUsage.objects.get(attempt=one.attempt).cost_usd == Decimal("0.1")
    assert TaskUsage.objects.get(task=second).output_tokens == 7
    today = AgentDailyUsage.objects.get(agent=agent, day=day)
    assert (today.input_tokens, today.output_tokens, today.cost_usd) == (5, 7, Decimal("0.100001"))
    assert ProjectDailyUsage.objects.get(project=project, day=day).tokens == 12
    # The next UTC day starts new daily totals; the attempt's and task's keep adding up.
    midnight = (clock.now().replace(hour=0, minute=0, second=0) - clock.now()).total_seconds() + 86400
    clock.advance(midnight - 60)
    attempt_renew(proof=proof_of(two), usage={"input_tokens": 1})
    clock.advance(120)
    assert attempt_renew(proof=proof_of(two), usage={"input_tokens": 2}).status == "active"
    tomorrow = AgentDailyUsage.objects.get(agent=agent, day=clock.now().date())
    assert tomorrow.input_tokens == 2
    assert TaskUsage.objects.get(task=second).tokens == 10


def test_agent_daily_budget_stops_claims_for_the_day_and_resets_the_next(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    agent = budget_set(subject=agent, actor=SYSTEM, daily_cost_usd="1.00")
    first, second = TaskFactory(project=project), TaskFactory(project=project)
    grant = lease_claim(task=first, agent=agent)
    with pytest.raises(BudgetExhausted) as refused:
        note_add(proof=proof_of(grant), kind="progress", content="x", usage={"cost_usd": "1.5"})
    assert refused.value.details["scope"] == "agent"
    attempt_finish(proof=proof_of(grant), outcome="handoff", interruption_reason_code="other")
    with pytest.raises(TaskNotClaimable) as not_claimable:
        lease_claim_next(project=project, agent=agent)
    assert not_claimable.value.details["reason"] == "budget"
    with pytest.raises(TaskNotClaimable):
        lease_claim(task=second, agent=agent)
    # Another agent may still work: the budget was this agent's.
    other = AgentFactory(projects=[project])
    assert lease_claim(task=second, agent=other).attempt.agent == other
    clock.advance(86400)
    assert lease_claim(task=first, agent=agent).attempt.agent == agent


def test_project_daily_budget_refuses_every_task_of_the_project(clock):
    project = ProjectFactory()
    project = budget_set(subject=project, actor=SYSTEM, daily_tokens=100)
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=agent)
    attempt_renew(proof=proof_of(grant), usage={"input_tokens": 80})
    assert [e.payload["scope"] for e in _events(EventType.BUDGET_WARNING)] == ["project"]
    with pytest.raises(BudgetExhausted):
        attempt_renew(proof=proof_of(grant), usage={"output_tokens": 20})
    attempt_finish(proof=proof_of(grant), outcome="done")
    TaskFactory(project=project)
    with pytest.raises(TaskNotClaimable):
        lease_claim_next(project=project, agent=AgentFactory(projects=[project]))
    assert len(_events(EventType.BUDGET_SET)) == 1


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"input_tokens": -1}, "usage.input_tokens"),
        ({"output_tokens": 1.5}, "usage.output_tokens"),
        ({"input_tokens": True}, "usage.input_tokens"),
        ({"cost_usd": "0.0000001"}, "usage.cost_usd"),
        ({"cost_usd": "-1"}, "usage.cost_usd"),
        ({"cost_usd": "NaN"}, "usage.cost_usd"),
        ({"cost_usd": "abc"}, "usage.cost_usd"),
        ({"cost_usd": [1]}, "usage.cost_usd"),
        ({"tokens": 3}, "usage.tokens"),
        ("lots", "usage"),
    ],
)
def test_bad_usage_is_refused_naming_the_field(usage, field):
    with pytest.raises(ValidationFailed) as refused:
        validate_usage(usage)
    assert field in refused.value.details["fields"]


def test_a_holder_cannot_lift_its_own_budget():
    task = TaskFactory(budget_tokens=10)
    agent = AgentFactory(projects=[task.project])
    grant = lease_claim(task=task, agent=agent)
    with pytest.raises(PermissionDenied):
        task_update(
            task=task, actor=SYSTEM.__class__(agent=agent), changes={"budget_tokens": 10**6}, proof=proof_of(grant)
        )
    # Anyone else (here the system) may.
    assert task_update(task=task, actor=SYSTEM, changes={"budget_tokens": 20}).task.budget_tokens == 20


@pytest.mark.django_db(transaction=True)
def test_concurrent_renewals_crossing_80_percent_write_one_warning_and_lose_no_usage():
    threads = 8
    project = ProjectFactory()
    # Each task its own holder, all charging one project budget: 8 x 11 = 88 of 100 crosses 80 % once.
    budget_set(subject=project, actor=SYSTEM, daily_tokens=100)
    grants = []
    for _ in range(threads):
        task = TaskFactory(project=project)
        grants.append(lease_claim(task=task, agent=AgentFactory(projects=[project])))

    def renew(index: int) -> None:
        attempt_renew(proof=proof_of(grants[index]), usage={"input_tokens": 11, "cost_usd": "0.01"})

    results = run_in_threads(threads, renew)
    assert [r for r in results if isinstance(r, BaseException)] == []
    total = ProjectDailyUsage.objects.get(project=project)
    assert (total.input_tokens, total.cost_usd) == (88, Decimal("0.08"))
    assert len(_events(EventType.BUDGET_WARNING)) == 1
    assert _events(EventType.BUDGET_EXHAUSTED) == []


def test_a_claim_refused_for_budget_tells_no_one_to_finish_and_shows_dollars_and_cents(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    agent = budget_set(subject=agent, actor=SYSTEM, daily_cost_usd="0.10")
    first, second = TaskFactory(project=project), TaskFactory(project=project)
    grant = lease_claim(task=first, agent=agent)
    with pytest.raises(BudgetExhausted) as refused:
        note_add(proof=proof_of(grant), kind="progress", content="x", usage={"cost_usd": "0.15"})
    assert "$0.15)" in refused.value.message  # not $0.150000000000000
    assert "finish or release the attempt" in refused.value.message  # the holder is told how it may end
    attempt_finish(proof=proof_of(grant), outcome="handoff", interruption_reason_code="other")
    with pytest.raises(TaskNotClaimable) as not_claimable:
        lease_claim(task=second, agent=agent)
    message = not_claimable.value.message
    assert "$0.15)" in message
    assert "finish or release" not in message  # the claimer holds nothing to finish


def test_dollars_show_cents_and_smaller_fractions_only_when_there():
    from core.text import dollars

    assert [dollars(v) for v in (Decimal("0.150000000000000"), 2, "0.0042000", Decimal("12.5"))] == [
        "$0.15",
        "$2.00",
        "$0.0042",
        "$12.50",
    ]
