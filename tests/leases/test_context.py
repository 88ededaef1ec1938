from __future__ import annotations

import pytest
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from leases.context import bound_context, encoded_size, work_context
from leases.services import attempt_finish, lease_claim, note_add
from ledger.actors import SYSTEM
from ledger.services import dependency_add
from tests.factories import TaskFactory
from tests.leases.helpers import proof_of


@pytest.mark.django_db
def test_context_carries_what_a_new_holder_inherits(clock, project, agent):
    task = TaskFactory(project=project, description="Do it", acceptance_criteria="Tests pass")
    blocker = TaskFactory(project=project, title="Schema first", status="open")
    first = lease_claim(task=task, agent=agent, branch="feature/search", lease_seconds=60)
    note_add(proof=proof_of(first), kind="checkpoint", content="step 1 done", next_steps=["step 2"])
    attempt_finish(
        proof=proof_of(first), outcome="handoff", interruption_reason_code="context_limit", result_summary="half"
    )
    dependency_add(task=task, blocked_by=blocker, actor=SYSTEM)
    context = work_context(task=task, now=clock.now())
    assert context["task"]["description"] == "Do it"
    assert context["task"]["acceptance_criteria"] == "Tests pass"
    assert context["blockers"] == [{"key": "WEB-2", "title": "Schema first"}]
    assert context["latest_checkpoint"]["content"] == "step 1 done"
    assert context["latest_checkpoint"]["next_steps"] == ["step 2"]
    previous = context["previous_attempt"]
    assert (previous["status"], previous["result_summary"], previous["branch"]) == (
        "interrupted",
        "half",
        "feature/search",
    )
    assert context["truncated"] == []


@pytest.mark.django_db
def test_three_troubled_attempts_in_a_row_raise_a_warning(clock, project, agent):
    task = TaskFactory(project=project)
    for _ in range(3):
        grant = lease_claim(task=task, agent=agent)
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
    assert any("last 3 attempts" in warning for warning in work_context(task=task, now=clock.now())["warnings"])


@pytest.mark.django_db
def test_a_one_megabyte_description_stays_within_the_budget(clock, project, agent):
    task = TaskFactory(project=project, description="é" * 1_000_000, acceptance_criteria="must hold")
    grant = lease_claim(task=task, agent=agent)
    note_add(proof=proof_of(grant), kind="checkpoint", content="x" * 8000, next_steps=["y" * 500] * 20)
    context = work_context(task=task, now=clock.now(), attempt=grant.attempt)
    assert encoded_size(context) <= 16384
    assert "task.description" in context["truncated"]
    assert context["task"]["acceptance_criteria"] == "must hold"
    assert context["task"]["description"].endswith("[…truncated]")
    assert context["label"] == grant.attempt.label


@pytest.mark.django_db
def test_the_budget_follows_the_setting(clock, project):
    task = TaskFactory(project=project, description="z" * 50_000)
    with override_settings(LEASEHOLD_CONTEXT_MAX_BYTES=4096):
        context = work_context(task=task, now=clock.now())
    assert encoded_size(context) <= 4096


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=20_000)


@settings(max_examples=60, deadline=None)
@given(description=texts, criteria=texts, summary=texts, steps=st.lists(st.text(max_size=500), max_size=20))
def test_bound_context_always_fits_and_names_its_cuts(description, criteria, summary, steps):
    context = {
        "task": {"key": "WEB-1", "title": "t", "description": description, "acceptance_criteria": criteria},
        "blockers": [],
        "latest_checkpoint": None,
        "previous_attempt": {"result_summary": summary, "next_steps": steps},
        "warnings": [],
        "truncated": [],
    }
    original = {"description": description, "criteria": criteria}
    bounded = bound_context(context, max_bytes=4096)
    assert encoded_size(bounded) <= 4096
    if bounded["task"]["description"] != original["description"]:
        assert "task.description" in bounded["truncated"]
    if bounded["task"]["acceptance_criteria"] != original["criteria"]:
        assert "task.acceptance_criteria" in bounded["truncated"]


@pytest.mark.django_db
def test_a_failure_hidden_behind_a_later_release_is_still_in_the_context(clock, project, agent):
    from leases.services import attempt_release
    from ledger import clock as clock_module

    task = TaskFactory(project=project, status="ready")
    failed = lease_claim(task=task, agent=agent)
    attempt_finish(
        proof=proof_of(failed), outcome="failed", failure_reason_code="tests_failed", result_summary="3 tests red"
    )
    released = lease_claim(task=task, agent=agent)
    attempt_release(proof=proof_of(released))
    task.refresh_from_db()

    context = work_context(task=task, now=clock_module.now())

    assert context["previous_attempt"]["status"] == "released"
    assert context["last_failed_attempt"]["id"] == failed.attempt.pk
    assert context["last_failed_attempt"]["failure_reason_code"] == "tests_failed"
    assert context["last_failed_attempt"]["result_summary"] == "3 tests red"
