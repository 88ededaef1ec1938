"""The hot cycle's writes, combined into single statements on PostgreSQL (`core.combined`), keep every
row, event, refusal and trigger effect the separate statements had; SQLite runs the separate ones.
The same tests run on both databases (docs/performance.md, "Round trips, round two")."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.models import Sum

from core.combined import update_row_or_queue, writes_combined
from core.errors import InvalidLeaseToken, LeaseExpired, LeaseNotHeld, NotFound, StaleEpoch
from insight.models import FleetDayTallyChange
from leases.models import Attempt, AttemptStatus, LeaseClock, Note
from leases.services import HolderProof, attempt_finish, attempt_renew, lease_claim, lease_claim_next, note_add
from ledger.models import Event, EventType, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of


def _events(task: Task) -> list[tuple[str, int | None, int | None, dict]]:
    return list(
        Event.objects.filter(task=task)
        .exclude(type=EventType.TASK_CREATED)
        .order_by("id")
        .values_list("type", "attempt_id", "project_id", "payload")
    )


@pytest.mark.django_db
def test_a_cycle_writes_the_same_rows_events_and_trigger_effects(clock, project, agent):
    TaskFactory(project=project)
    grant = lease_claim_next(project=project, agent=agent)
    assert grant is not None
    task, attempt = grant.task, grant.attempt
    assert Task.objects.get(pk=task.pk).held is True
    assert Task.objects.get(pk=task.pk).epoch == attempt.epoch == 1
    assert LeaseClock.objects.get(attempt_id=attempt.pk).expires_at == attempt.lease_expires_at
    proof = proof_of(grant)

    clock.advance(60)
    renewed = attempt_renew(proof=proof, lease_seconds=1200)
    assert (renewed.renew_count, renewed.task.status, renewed.new_comments) == (1, "ready", 0)
    assert renewed.lease_expires_at == clock.now() + timedelta(seconds=1200)
    clock.advance(60)
    written = note_add(proof=proof, kind="checkpoint", content="halfway", next_steps=["finish"], important=True)
    # A note extends by the attempt's own length, never shortening the renewal's lease.
    assert written.lease_expires_at == renewed.lease_expires_at
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.renew_count, stored.last_worked_at, stored.last_renewed_at) == (1, clock.now(), clock.now())
    assert LeaseClock.objects.get(attempt_id=attempt.pk).expires_at == stored.lease_expires_at
    note = Note.objects.get()
    assert (note.pk, note.attempt_id, note.content, note.next_steps, note.important) == (
        written.note.pk,
        attempt.pk,
        "halfway",
        ["finish"],
        True,
    )

    finished = attempt_finish(proof=proof, outcome="done", result_summary="shipped")
    assert finished.task.status == "done"
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.status, stored.finished_at, stored.result_summary) == (
        AttemptStatus.COMPLETED,
        clock.now(),
        "shipped",
    )
    assert Task.objects.get(pk=task.pk).held is False
    assert not LeaseClock.objects.filter(attempt_id=attempt.pk).exists()
    pid = project.pk
    assert _events(task) == [
        (
            EventType.ATTEMPT_CLAIMED,
            attempt.pk,
            pid,
            {"agent": agent.handle, "epoch": 1, "lease_seconds": attempt.lease_seconds, "branch": attempt.branch},
        ),
        (
            EventType.NOTE_ADDED,
            attempt.pk,
            pid,
            {"note": note.pk, "kind": "checkpoint", "important": True, "checkpoint": True},
        ),
        (EventType.TASK_STATUS_CHANGED, None, pid, {"from": "ready", "to": "done", "version": task.version + 1}),
        (
            EventType.ATTEMPT_FINISHED,
            attempt.pk,
            pid,
            {"outcome": "done", "status": "completed", "failure_reason_code": None, "interruption_reason_code": None},
        ),
    ]
    assert Event.objects.filter(task=task, actor_agent=agent).exclude(type=EventType.TASK_CREATED).count() == 4
    counts = FleetDayTallyChange.objects.filter(project_id=pid, agent_id=agent.pk).aggregate(
        claims=Sum("claims"), finished=Sum("finished")
    )
    assert counts == {"claims": 1, "finished": 1}


@pytest.mark.django_db
def test_renew_and_note_refusals_keep_their_codes(clock, project, agent):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    proof = proof_of(grant)
    for call in (
        lambda proof: attempt_renew(proof=proof),
        lambda proof: note_add(proof=proof, kind="progress", content="x"),
    ):
        with pytest.raises(InvalidLeaseToken):
            call(proof_of(grant, token="not-the-token"))
        with pytest.raises(StaleEpoch):
            call(proof_of(grant, epoch=0))
        with pytest.raises(NotFound):
            call(HolderProof(proof.attempt_id + 99, proof.token, 1, proof.agent))
        with pytest.raises(NotFound):  # another agent's attempt is not theirs
            call(HolderProof(proof.attempt_id, proof.token, 1, AgentFactory(projects=[project])))
    assert not Note.objects.exists()
    assert Attempt.objects.get(pk=grant.attempt.pk).renew_count == 0

    clock.advance(grant.attempt.lease_seconds + 1)
    with pytest.raises(LeaseExpired):
        note_add(proof=proof, kind="progress", content="late")
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.EXPIRED  # the refusal's expiry commits
    with pytest.raises(LeaseExpired):
        attempt_renew(proof=proof)
    assert not Note.objects.exists()


@pytest.mark.django_db
def test_a_budget_takes_the_full_path_and_still_renews(clock, project, agent):
    task = TaskFactory(project=project, budget_tokens=1000)
    grant = lease_claim(task=task, agent=agent)
    renewed = attempt_renew(proof=proof_of(grant))
    assert renewed.renew_count == 1
    written = note_add(proof=proof_of(grant), kind="progress", content="ok")
    assert Note.objects.get().pk == written.note.pk


@pytest.mark.django_db
def test_queued_writes_are_sent_before_any_other_statement(project):
    task, other = TaskFactory(project=project), TaskFactory(project=project)
    with transaction.atomic(), writes_combined():
        task.title = "queued first"
        update_row_or_queue(task, ["title"])
        # A read in the block sees the write made before it.
        assert Task.objects.get(pk=task.pk).title == "queued first"
        task.title, other.title = "twice", "once"
        update_row_or_queue(task, ["title"])
        update_row_or_queue(other, ["title"])
        task.priority = 7
        update_row_or_queue(task, ["priority"])  # the same row again: sent one by one
    assert Task.objects.get(pk=task.pk).title == "twice"
    assert Task.objects.get(pk=task.pk).priority == 7
    assert Task.objects.get(pk=other.pk).title == "once"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement renewal is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_renewal_waiting_on_a_finish_is_checked_again_and_refused(clock):
    """The renewal's UPDATE waits for the attempt's row lock; once the holder of that lock ends the
    attempt and commits, the condition is checked on the new row (READ COMMITTED) and the renewal
    falls to the full path, which refuses it: a finished attempt is never renewed."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    locked, release = threading.Event(), threading.Event()

    def finish_under_lock() -> None:
        try:
            with transaction.atomic():
                Attempt.objects.select_for_update().get(pk=grant.attempt.pk)
                locked.set()
                release.wait(10)
                Attempt.objects.filter(pk=grant.attempt.pk).update(
                    status=AttemptStatus.COMPLETED, finished_at=grant.attempt.claimed_at
                )
        finally:
            connections.close_all()

    finisher = threading.Thread(target=finish_under_lock)
    finisher.start()
    assert locked.wait(10)
    outcome: list[Exception | Attempt] = []

    def renew() -> None:
        try:
            outcome.append(attempt_renew(proof=proof_of(grant)))
        except Exception as refusal:
            outcome.append(refusal)
        finally:
            connections.close_all()

    renewer = threading.Thread(target=renew)
    renewer.start()
    renewer.join(0.5)
    assert renewer.is_alive()  # waiting on the finisher's lock
    release.set()
    finisher.join(10)
    renewer.join(10)
    assert len(outcome) == 1
    assert isinstance(outcome[0], LeaseNotHeld), outcome
    assert Attempt.objects.get(pk=grant.attempt.pk).renew_count == 0
