"""The lease services driven by a state machine; SPEC §1 is checked after every step.

Review attempts (SPEC §16.1) take part: work finished with `review` opens a
request, reviewers claim it through claim-next or by id (never their own
work), and decide it; the machine knows when the target moved (the task
changed since the request) and checks that no approval of a moved target
ever lands. Quarantine (§16.4) is off here (its rules are pinned in
`test_quarantine.py`): the machine fails tasks on purpose.

Three agents work four ready tasks of one project under a frozen clock. The
machine claims, claims-next, renews, writes notes, finishes, releases,
revokes, reassigns (refused for a task in review or done), sweeps, moves the
clock (also to the very instant a lease lapses) and reopens finished tasks, presenting right and deliberately wrong
lease proofs. It keeps its own model of every attempt (token, epoch, lease)
and checks the database against the rules, with plain queries, after each
step.

Each example runs in its own savepoint inside the test's transaction and is
rolled back at teardown, so every example starts from an empty ledger.
"""

from __future__ import annotations

import copy
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import transaction
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from core.errors import LedgerError
from leases.models import (
    AGENT_NOTE_KINDS,
    PENDING_REVIEW_STATUSES,
    Attempt,
    AttemptKind,
    AttemptStatus,
    FailureReason,
    InterruptionReason,
    LeaseClock,
    Note,
    ReviewRequest,
    ReviewStatus,
)
from leases.selectors import IN_PROGRESS, IN_REVIEW, with_lease_state
from leases.services import (
    HolderProof,
    Outcome,
    attempt_finish,
    attempt_release,
    attempt_renew,
    lease_claim,
    lease_claim_next,
    note_add,
    review_claim,
    review_claim_next,
    sweep_expired,
    task_force_release,
    task_update,
)
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, Event, EventType, Project, Task, TaskStatus
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

R = TypeVar("R")

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
AGENTS = 3
TASKS = 4
DEFAULT_LEASE_SECONDS = 900
NOTE_MAX_CHARS = 8000

# Requested lease lengths: invalid (0), below the minimum, at and around it,
# ordinary, at and above the maximum.
CLAIM_LEASE_SECONDS = (None, 0, 1, 29, 30, 31, 600, 86_400, 86_401, 1_000_000)
RENEW_LEASE_SECONDS = (None, 0, 1, 29, 31, 600, 86_400, 86_401)
CLOCK_STEPS = (1, 29, 30, 31, 300, 899, 900, 3_600, 86_400, 86_401)
NOTE_LENGTHS = (1, 300, NOTE_MAX_CHARS, NOTE_MAX_CHARS + 1, 3 * NOTE_MAX_CHARS)
# Reassign reserves a task that may still be claimed as work; in any other status (done, or review even
# with its review lease held) it is refused and writes nothing (leases/services/revoke.py says why).
REASSIGNABLE = (TaskStatus.OPEN, TaskStatus.READY, TaskStatus.BLOCKED)

TERMINAL_EVENT = {
    AttemptStatus.COMPLETED: EventType.ATTEMPT_FINISHED,
    AttemptStatus.FAILED: EventType.ATTEMPT_FINISHED,
    AttemptStatus.INTERRUPTED: EventType.ATTEMPT_FINISHED,
    AttemptStatus.RELEASED: EventType.ATTEMPT_RELEASED,
    AttemptStatus.EXPIRED: EventType.ATTEMPT_EXPIRED,
    AttemptStatus.REVOKED: EventType.ATTEMPT_REVOKED,
}
TERMINAL_EVENT_TYPES = frozenset(TERMINAL_EVENT.values())
FINISHED_STATUS = {
    Outcome.DONE: AttemptStatus.COMPLETED,
    Outcome.REVIEW: AttemptStatus.COMPLETED,
    Outcome.FAILED: AttemptStatus.FAILED,
    Outcome.HANDOFF: AttemptStatus.INTERRUPTED,
}


# How a holder call proves possession.
HOLDER = "holder"  # the attempt's own id, token and epoch
WRONG_TOKEN = "wrong_token"  # a random token
FOREIGN_TOKEN = "foreign_token"  # the token of another attempt
OLD_EPOCH = "old_epoch"  # the right token with the epoch of an earlier attempt of the task
OTHER_AGENT = "other_agent"  # the right proof, presented by another agent
# The holder's own proof half of the time, so that leases live long enough to matter.
PROOF_KINDS = (HOLDER, HOLDER, HOLDER, HOLDER, WRONG_TOKEN, FOREIGN_TOKEN, OLD_EPOCH, OTHER_AGENT)


def outcome_of(call: Callable[[], R]) -> tuple[R | None, str | None]:
    """Run one service call: its result, or the code of the refusal it raised.

    Called inside the example's transaction, each service still runs in a
    savepoint of its own (`write_transaction`), so a refusal rolls back its
    partial writes and leaves the example's transaction usable.
    """
    try:
        return call(), None
    except LedgerError as exc:
        return None, exc.code


def clamp(seconds: int) -> int:
    return max(django_settings.LEASEHOLD_MIN_LEASE_SECONDS, min(django_settings.LEASEHOLD_MAX_LEASE_SECONDS, seconds))


@dataclass
class AttemptModel:
    pk: int
    task: int  # index into the machine's tasks
    agent: int  # index into the machine's agents
    token: str
    epoch: int
    lease_seconds: int
    expires_at: datetime
    # `active` until something ends it; a lapsed lease stays active until expired.
    status: str = AttemptStatus.ACTIVE
    notes: int = 0
    kind: str = AttemptKind.WORK
    # The task's description changed under this work lease: finishing needs acknowledged_version.
    task_edited: bool = False


@dataclass
class TaskModel:
    pk: int
    ready_since: datetime | None
    epoch: int = 0
    status: str = TaskStatus.READY
    reserved_for: int | None = None
    # A pending review request (SPEC §16.1): whose work, its order, and whether the task moved since.
    review_open: bool = False
    review_worker: int | None = None
    review_seq: int = 0
    review_moved: bool = False

    def changed(self) -> None:
        """The task's own fields or status changed: a pending review's target moved."""
        if self.review_open:
            self.review_moved = True


@dataclass(frozen=True)
class ProofCase:
    kind: str
    attempt: AttemptModel
    proof: HolderProof
    agent: int


@dataclass(frozen=True)
class FencedCall:
    """A call the machine expected to be refused, and what happened to it."""

    description: str
    expected: frozenset[str]
    code: str | None
    wrote_only_what_was_allowed: bool


@dataclass
class Ledger:
    """One plain read of every row the checks look at (the example's ledger is tiny)."""

    attempts: dict[int, dict[str, Any]]
    # Every task field, plus `effective_status` and the holder, as the selector computes them now.
    tasks: dict[int, dict[str, Any]]
    notes: Counter[int]  # per attempt
    # (type, attempt id, the `status` of the payload): in order, never rewritten.
    events: list[tuple[str, int | None, str | None]]


def read_ledger() -> Ledger:
    return Ledger(
        attempts={row["id"]: dict(row) for row in Attempt.objects.values()},
        tasks={row["id"]: dict(row) for row in with_lease_state(Task.objects.all(), now=clock.now()).values()},
        notes=Counter(Note.objects.values_list("attempt_id", flat=True)),
        events=list(Event.objects.order_by("id").values_list("type", "attempt_id", "payload__status")),
    )


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.example = transaction.atomic()
        self.example.__enter__()
        # Isolation: every example starts from an empty ledger.
        assert not Project.objects.exists()
        assert not Agent.objects.exists()
        assert not Attempt.objects.exists()
        clock.freeze(START)
        admin = get_user_model().objects.create(username="admin", is_staff=True, is_superuser=True)
        self.admin = Actor(user=admin)
        self.project: Project = ProjectFactory.create(
            default_lease_seconds=DEFAULT_LEASE_SECONDS, max_consecutive_failures=0
        )
        self.reviews_opened = 0
        self.agents: list[Agent] = [AgentFactory.create(projects=[self.project]) for _ in range(AGENTS)]
        self.tasks: list[Task] = [TaskFactory.create(project=self.project) for _ in range(TASKS)]
        self.model = [TaskModel(pk=task.pk, ready_since=task.ready_since) for task in self.tasks]
        self.attempts: list[AttemptModel] = []
        self.fenced_calls: list[FencedCall] = []
        self.lease_seen: dict[int, datetime] = {}
        self.calls = 0
        self.last_read: tuple[tuple[int, datetime], Ledger] | None = None

    def teardown(self) -> None:
        try:
            transaction.set_rollback(True)
            self.example.__exit__(None, None, None)
        finally:
            clock.unfreeze()

    def call(self, service_call: Callable[[], R]) -> tuple[R | None, str | None]:
        """Every service call of the machine goes through here, so that `ledger()` knows to read again."""
        self.calls += 1
        return outcome_of(service_call)

    def version_of(self, task: int) -> int:
        """The task's version as the holder re-reads it."""
        return Task.objects.values_list("version", flat=True).get(pk=self.model[task].pk)

    def ledger(self) -> Ledger:
        """The ledger now: read again after any service call or clock move, else shared by the checks."""
        key = (self.calls, clock.now())
        if self.last_read is None or self.last_read[0] != key:
            self.last_read = (key, read_ledger())
        return self.last_read[1]

    # --- the model ---------------------------------------------------------------

    def active_attempt(self, task: int) -> AttemptModel | None:
        return next((a for a in self.attempts if a.task == task and a.status == AttemptStatus.ACTIVE), None)

    def live(self, attempt: AttemptModel | None) -> bool:
        return attempt is not None and attempt.status == AttemptStatus.ACTIVE and attempt.expires_at > clock.now()

    def expire(self, attempt: AttemptModel) -> None:
        attempt.status = AttemptStatus.EXPIRED
        task = self.model[attempt.task]
        if task.status == TaskStatus.READY:
            task.ready_since = attempt.expires_at

    def end(self, attempt: AttemptModel, status: str) -> None:
        """The holder or an admin ended the attempt; a ready task is claimable again from now."""
        attempt.status = status
        task = self.model[attempt.task]
        if task.status == TaskStatus.READY:
            task.ready_since = clock.now()

    def claim_refusal(self, task: int, agent: int) -> str | None:
        model = self.model[task]
        if self.live(self.active_attempt(task)):
            return "TASK_TAKEN"
        if model.status != TaskStatus.READY or model.reserved_for not in (None, agent):
            return "TASK_NOT_CLAIMABLE"
        return None

    def record_grant(
        self, grant: Any, *, task: int, agent: int, requested: int | None, kind: str = AttemptKind.WORK
    ) -> None:
        model = self.model[task]
        lapsed = self.active_attempt(task)
        if lapsed is not None:
            self.expire(lapsed)
        model.epoch += 1
        seconds = clamp(requested if requested is not None else DEFAULT_LEASE_SECONDS)
        attempt = AttemptModel(
            pk=grant.attempt.pk,
            task=task,
            agent=agent,
            token=grant.token,
            epoch=model.epoch,
            lease_seconds=seconds,
            expires_at=clock.now() + timedelta(seconds=seconds),
            kind=kind,
        )
        assert grant.attempt.kind == kind
        assert grant.task.pk == model.pk
        assert grant.attempt.epoch == attempt.epoch
        assert grant.attempt.lease_seconds == seconds, f"requested {requested}, granted {grant.attempt.lease_seconds}"
        assert grant.attempt.lease_expires_at == attempt.expires_at
        self.attempts.append(attempt)

    def draw_proof(self, data: st.DataObject, kind: str | None = None) -> ProofCase:
        attempts = [a for a in self.attempts if kind is None or a.kind == kind]
        active = [a for a in attempts if a.status == AttemptStatus.ACTIVE]
        pool = active if active and data.draw(st.booleans(), label="prefer active") else attempts
        attempt = data.draw(st.sampled_from(pool), label="attempt")
        kind = data.draw(st.sampled_from(PROOF_KINDS), label="proof")
        token, epoch, agent = attempt.token, attempt.epoch, attempt.agent
        if kind == WRONG_TOKEN:
            token = secrets.token_urlsafe(32)
        elif kind == FOREIGN_TOKEN:
            others = [a.token for a in self.attempts if a.pk != attempt.pk] or [secrets.token_urlsafe(32)]
            token = data.draw(st.sampled_from(others), label="foreign token")
        elif kind == OLD_EPOCH:
            epoch = data.draw(st.integers(min(1, attempt.epoch - 1), attempt.epoch - 1), label="old epoch")
        elif kind == OTHER_AGENT:
            agent = (agent + data.draw(st.integers(1, AGENTS - 1), label="other agent")) % AGENTS
        proof = HolderProof(attempt_id=attempt.pk, token=token, epoch=epoch, agent=self.agents[agent])
        return ProofCase(kind=kind, attempt=attempt, proof=proof, agent=agent)

    def expected_refusals(self, case: ProofCase) -> frozenset[str]:
        """The fencing of SPEC §3; empty when the call must go through."""
        attempt = case.attempt
        if case.kind == OTHER_AGENT:
            return frozenset({"NOT_FOUND"})
        if case.kind in (WRONG_TOKEN, FOREIGN_TOKEN):
            return frozenset({"INVALID_LEASE_TOKEN"})
        if attempt.status == AttemptStatus.REVOKED:
            return frozenset({"LEASE_NOT_HELD"})  # "the revoked holder's next write", whatever its epoch
        if case.proof.epoch < attempt.epoch:
            return frozenset({"STALE_EPOCH"})
        if attempt.status != AttemptStatus.ACTIVE:
            ended = "LEASE_EXPIRED" if attempt.status == AttemptStatus.EXPIRED else "LEASE_NOT_HELD"
            # SPEC §3 names both refusals for the attempt of a task claimed again
            # since: it is no longer active, and its epoch is older than the task's.
            if self.model[attempt.task].epoch > attempt.epoch:
                return frozenset({ended, "STALE_EPOCH"})
            return frozenset({ended})
        if attempt.expires_at <= clock.now():
            return frozenset({"LEASE_EXPIRED"})
        return frozenset()

    def fenced(
        self, case: ProofCase, description: str, call: Callable[[HolderProof], R], *, invalid_input: bool = False
    ) -> R | None:
        """Make a holder call; return its result when it must go through, else check the refusal.

        A refusal must carry the expected code and write nothing, except that
        the holder's own proof of a lapsed lease expires the attempt (SPEC §3).
        """
        expected = frozenset({"VALIDATION_ERROR"}) if invalid_input else self.expected_refusals(case)
        lazy_expiry = expected == {"LEASE_EXPIRED"} and case.attempt.status == AttemptStatus.ACTIVE
        before = self.ledger()
        result, code = self.call(lambda: call(case.proof))
        event(f"{description}/{case.kind}: {code or 'ok'}")
        if not expected:
            assert code is None, f"{description} with {case.kind} proof of {case.attempt} was refused: {code}"
            return result
        allowed = copy.deepcopy(before)
        if lazy_expiry:
            self.expire(case.attempt)
            row = allowed.attempts[case.attempt.pk]
            row.update(status=AttemptStatus.EXPIRED, finished_at=row["lease_expires_at"])
            if allowed.tasks[row["task_id"]]["status"] == TaskStatus.READY:
                allowed.tasks[row["task_id"]]["ready_since"] = row["lease_expires_at"]
            allowed.tasks[row["task_id"]]["held"] = False  # the triggers follow the attempt (SPEC §25)
            allowed.events.append((EventType.ATTEMPT_EXPIRED, case.attempt.pk, None))
        self.fenced_calls.append(
            FencedCall(
                description=f"{description} with {case.kind} proof {case.proof.epoch=} of {case.attempt}",
                expected=expected,
                code=code,
                wrote_only_what_was_allowed=self.ledger() == allowed,
            )
        )
        return None

    # --- rules -------------------------------------------------------------------

    @rule(
        task=st.integers(0, TASKS - 1),
        agent=st.integers(0, AGENTS - 1),
        lease_seconds=st.sampled_from(CLAIM_LEASE_SECONDS),
    )
    def claim(self, task: int, agent: int, lease_seconds: int | None) -> None:
        expected = "VALIDATION_ERROR" if lease_seconds == 0 else self.claim_refusal(task, agent)
        before = self.ledger()
        grant, code = self.call(
            lambda: lease_claim(task=self.tasks[task], agent=self.agents[agent], lease_seconds=lease_seconds)
        )
        event(f"claim: {code or 'ok'}")
        assert code == expected, f"claim of task {task} by agent {agent}: {code or 'ok'}, expected {expected or 'ok'}"
        if grant is None:
            assert self.ledger() == before, "a refused claim wrote something"
            return
        self.record_grant(grant, task=task, agent=agent, requested=lease_seconds)

    @rule(agent=st.integers(0, AGENTS - 1), lease_seconds=st.sampled_from(CLAIM_LEASE_SECONDS))
    def claim_next(self, agent: int, lease_seconds: int | None) -> None:
        candidates = sorted(
            (task for task in range(TASKS) if self.claim_refusal(task, agent) is None),
            key=lambda task: (self.model[task].ready_since, self.model[task].pk),
        )
        before = self.ledger()
        grant, code = self.call(
            lambda: lease_claim_next(project=self.project, agent=self.agents[agent], lease_seconds=lease_seconds)
        )
        event(f"claim_next: {code or ('ok' if grant else 'none')}")
        assert code == ("VALIDATION_ERROR" if lease_seconds == 0 else None), f"claim-next: {code}"
        if code is not None:
            assert self.ledger() == before, "a refused claim-next wrote something"
            return
        if grant is None:
            assert not candidates, f"claim-next found nothing; tasks {candidates} were claimable"
            assert self.ledger() == before, "a claim-next that found nothing wrote something"
            return
        assert candidates, f"claim-next claimed {grant.task.key}; nothing was claimable"
        expected = candidates[0]
        assert grant.task.pk == self.model[expected].pk, f"claim-next took {grant.task.key}, not task {expected}"
        self.record_grant(grant, task=expected, agent=agent, requested=lease_seconds)

    @precondition(lambda self: self.attempts)
    @rule(data=st.data(), lease_seconds=st.sampled_from(RENEW_LEASE_SECONDS))
    def renew(self, data: st.DataObject, lease_seconds: int | None) -> None:
        case = self.draw_proof(data)
        renewed = self.fenced(
            case,
            "renew",
            lambda proof: attempt_renew(proof=proof, lease_seconds=lease_seconds),
            invalid_input=lease_seconds == 0,
        )
        if renewed is None:
            return
        attempt = case.attempt
        extension = clamp(lease_seconds) if lease_seconds is not None else attempt.lease_seconds
        attempt.expires_at = max(attempt.expires_at, clock.now() + timedelta(seconds=extension))
        assert renewed.lease_expires_at == attempt.expires_at

    @precondition(lambda self: self.attempts)
    @rule(data=st.data(), kind=st.sampled_from(AGENT_NOTE_KINDS), length=st.sampled_from(NOTE_LENGTHS))
    def note(self, data: st.DataObject, kind: str, length: int) -> None:
        case = self.draw_proof(data)
        content = ("progress " * (length // 9 + 1))[:length]
        written = self.fenced(
            case,
            "note",
            lambda proof: note_add(proof=proof, kind=kind, content=content),
            invalid_input=length > NOTE_MAX_CHARS,
        )
        if written is None:
            return
        attempt = case.attempt
        attempt.notes += 1
        attempt.expires_at = max(attempt.expires_at, clock.now() + timedelta(seconds=attempt.lease_seconds))
        assert written.lease_expires_at == attempt.expires_at

    @precondition(lambda self: any(a.kind == AttemptKind.WORK for a in self.attempts))
    @rule(data=st.data(), outcome=st.sampled_from(Outcome.ALL))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        case = self.draw_proof(data, kind=AttemptKind.WORK)
        failure = interruption = None
        if outcome == Outcome.FAILED:
            failure = data.draw(st.sampled_from([*FailureReason.values, None]), label="failure reason")
        if outcome == Outcome.HANDOFF:
            interruption = data.draw(st.sampled_from([*InterruptionReason.values, None]), label="interruption")
        # The holder re-read a task edited under its lease (`edit_under_review` pins the refusal).
        acknowledged = self.version_of(case.attempt.task) if case.attempt.task_edited else None
        finished = self.fenced(
            case,
            f"finish {outcome}",
            lambda proof: attempt_finish(
                proof=proof,
                outcome=outcome,
                result_summary="did things",
                failure_reason_code=failure,
                interruption_reason_code=interruption,
                acknowledged_version=acknowledged,
            ),
            invalid_input=outcome in (Outcome.FAILED, Outcome.HANDOFF) and not (failure or interruption),
        )
        if finished is None:
            return
        task = self.model[case.attempt.task]
        if outcome in (Outcome.DONE, Outcome.REVIEW):
            task.status = TaskStatus.DONE if outcome == Outcome.DONE else TaskStatus.REVIEW
            task.ready_since = None
            task.review_open = outcome == Outcome.REVIEW  # a newer request supersedes a pending one
            if task.review_open:
                self.reviews_opened += 1
                task.review_worker, task.review_seq, task.review_moved = case.agent, self.reviews_opened, False
        self.end(case.attempt, FINISHED_STATUS[outcome])
        assert finished.attempt.status == case.attempt.status
        assert finished.task.status == task.status

    @precondition(lambda self: self.attempts)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        case = self.draw_proof(data)
        released = self.fenced(case, "release", lambda proof: attempt_release(proof=proof, reason="stepping away"))
        if released is not None:
            self.end(case.attempt, AttemptStatus.RELEASED)

    @rule(
        data=st.data(),
        reserve_for=st.none() | st.integers(0, AGENTS - 1),
        reason=st.sampled_from(["agent is stuck", "agent is stuck", "agent is stuck", "", "   "]),
    )
    def revoke(self, data: st.DataObject, reserve_for: int | None, reason: str) -> None:
        """An admin force-releases a task, or reassigns it to an agent; held tasks half of the time."""
        held = [task for task in range(TASKS) if self.active_attempt(task) is not None]
        pool = held if held and data.draw(st.booleans(), label="prefer held") else range(TASKS)
        task = data.draw(st.sampled_from(pool), label="task")
        before = self.ledger()
        revocation, code = self.call(
            lambda: task_force_release(
                task=self.tasks[task],
                actor=self.admin,
                reason=reason,
                reserve_for=None if reserve_for is None else self.agents[reserve_for],
            )
        )
        event(f"revoke{'/reassign' if reserve_for is not None else ''}: {code or 'ok'}")
        expected = None
        if not reason.strip():
            expected = "VALIDATION_ERROR"
        elif reserve_for is not None and self.model[task].status not in REASSIGNABLE:
            expected = "INVALID_STATUS_TRANSITION"
        assert code == expected, f"revoke of a {self.model[task].status} task with reason {reason!r}: {code}"
        if revocation is None:
            assert self.ledger() == before, "a refused revocation wrote something"
            return
        active = self.active_attempt(task)
        revoked = None
        if active is not None and not self.live(active):
            self.expire(active)
        elif active is not None:
            self.end(active, AttemptStatus.REVOKED)
            revoked = active.pk
        if reserve_for is not None:
            if self.model[task].reserved_for != reserve_for:
                self.model[task].changed()
            self.model[task].reserved_for = reserve_for
        assert (revocation.revoked.pk if revocation.revoked else None) == revoked

    @precondition(lambda self: any(t.status not in REASSIGNABLE for t in self.model))
    @rule(data=st.data(), agent=st.integers(0, AGENTS - 1))
    def reassign_unclaimable(self, data: st.DataObject, agent: int) -> None:
        """An admin reassigns a task in review (its review lease held or not) or done: refused, nothing written.

        `revoke` reaches these seldom (it found review_next, then a reassign, on PostgreSQL); this rule
        reaches them whenever there is one, the reviewer's live lease included.
        """
        unclaimable = [i for i, t in enumerate(self.model) if t.status not in REASSIGNABLE]
        task = data.draw(st.sampled_from(unclaimable), label="task")
        held = self.active_attempt(task)
        before = self.ledger()
        revocation, code = self.call(
            lambda: task_force_release(
                task=self.tasks[task], actor=self.admin, reason="agent is stuck", reserve_for=self.agents[agent]
            )
        )
        event(f"reassign {self.model[task].status}{f' ({held.kind} held)' if held else ''}: {code or 'ok'}")
        assert code == "INVALID_STATUS_TRANSITION", f"reassigning a {self.model[task].status} task: {code or 'ok'}"
        assert revocation is None
        assert self.ledger() == before, "a refused reassign wrote something (the held lease included)"

    @rule()
    def sweep(self) -> None:
        lapsed = [a for a in self.attempts if a.status == AttemptStatus.ACTIVE and not self.live(a)]
        report, _ = self.call(sweep_expired)
        event(f"sweep: {len(lapsed)} lapsed")
        for attempt in lapsed:
            self.expire(attempt)
        assert report is not None
        assert report.expired == len(lapsed)

    @rule(seconds=st.sampled_from(CLOCK_STEPS))
    def advance(self, seconds: int) -> None:
        clock.advance(seconds)

    @precondition(lambda self: any(self.live(a) for a in self.attempts))
    @rule(data=st.data(), offset=st.sampled_from([timedelta(0), timedelta(microseconds=-1)]))
    def advance_to_expiry(self, data: st.DataObject, offset: timedelta) -> None:
        """Stop the clock at the instant a lease lapses (or one microsecond before)."""
        attempt = data.draw(st.sampled_from([a for a in self.attempts if self.live(a)]), label="attempt")
        clock.freeze(max(clock.now(), attempt.expires_at + offset))

    @precondition(
        lambda self: any(t.status in (TaskStatus.DONE, TaskStatus.REVIEW, TaskStatus.BLOCKED) for t in self.model)
    )
    @rule(data=st.data())
    def reopen(self, data: st.DataObject) -> None:
        """An admin puts a done, reviewed or blocked task back to ready, so work goes on."""
        reopenable = (TaskStatus.DONE, TaskStatus.REVIEW, TaskStatus.BLOCKED)
        finished = [i for i, t in enumerate(self.model) if t.status in reopenable]
        task = data.draw(st.sampled_from(finished), label="task")
        _, code = self.call(
            lambda: task_update(task=self.tasks[task], actor=self.admin, changes={"status": TaskStatus.READY})
        )
        assert code is None, f"reopening a {self.model[task].status} task: {code}"
        self.model[task].changed()
        self.model[task].status = TaskStatus.READY
        self.model[task].ready_since = clock.now()

    @precondition(lambda self: any(t.reserved_for is not None for t in self.model))
    @rule(data=st.data())
    def unreserve(self, data: st.DataObject) -> None:
        reserved = [i for i, t in enumerate(self.model) if t.reserved_for is not None]
        task = data.draw(st.sampled_from(reserved), label="task")
        _, code = self.call(
            lambda: task_update(task=self.tasks[task], actor=self.admin, changes={"reserved_for": None})
        )
        assert code is None, f"lifting a reservation: {code}"
        self.model[task].changed()
        self.model[task].reserved_for = None

    # --- reviews (SPEC §16.1) ---------------------------------------------------

    @precondition(lambda self: any(self.live(a) and a.kind == AttemptKind.WORK for a in self.attempts))
    @rule(data=st.data())
    def finish_for_review(self, data: st.DataObject) -> None:
        """The holder of a live work lease asks for review: the one way a review request opens."""
        attempt = data.draw(
            st.sampled_from([a for a in self.attempts if self.live(a) and a.kind == AttemptKind.WORK]), label="work"
        )
        proof = HolderProof(
            attempt_id=attempt.pk, token=attempt.token, epoch=attempt.epoch, agent=self.agents[attempt.agent]
        )
        acknowledged = None
        if attempt.task_edited:
            # SPEC §4: the task changed under the lease; a finish that has not re-read it is refused.
            before = self.ledger()
            _, code = self.call(
                lambda: attempt_finish(proof=proof, outcome=Outcome.REVIEW, result_summary="please look")
            )
            assert code == "ACKNOWLEDGEMENT_REQUIRED", f"finishing edited work unread: {code}"
            assert self.ledger() == before, "a refused finish wrote something"
            acknowledged = self.version_of(attempt.task)
        _, code = self.call(
            lambda: attempt_finish(
                proof=proof, outcome=Outcome.REVIEW, result_summary="please look", acknowledged_version=acknowledged
            )
        )
        event(f"finish_for_review: {code or 'ok'}")
        assert code is None, f"finishing live work for review: {code}"
        task = self.model[attempt.task]
        task.status, task.ready_since = TaskStatus.REVIEW, None
        self.reviews_opened += 1
        task.review_open, task.review_worker, task.review_seq = True, attempt.agent, self.reviews_opened
        task.review_moved = False
        self.end(attempt, AttemptStatus.COMPLETED)

    @precondition(lambda self: any(t.review_open for t in self.model))
    @rule(data=st.data())
    def edit_under_review(self, data: st.DataObject) -> None:
        """An admin edits a task whose review is pending (under a live review lease, a contested write)."""
        task = data.draw(st.sampled_from([i for i, t in enumerate(self.model) if t.review_open]), label="task")
        self.edits = getattr(self, "edits", 0) + 1
        changes = {"description": f"edited {self.edits}"}
        _, code = self.call(lambda: task_update(task=self.tasks[task], actor=self.admin, changes=changes))
        assert code is None, f"editing a task under review: {code}"
        self.model[task].changed()
        # A task reopened and claimed again while its review is pending: the edit lands under a work lease.
        for attempt in self.attempts:
            if attempt.task == task and attempt.kind == AttemptKind.WORK and attempt.status == AttemptStatus.ACTIVE:
                attempt.task_edited = True

    def review_refusal(self, task: int, agent: int) -> str | None:
        model = self.model[task]
        if model.review_worker == agent:
            return "PERMISSION_DENIED"  # self-review
        if self.live(self.active_attempt(task)):
            return "TASK_TAKEN"
        if model.status != TaskStatus.REVIEW:
            return "TASK_NOT_CLAIMABLE"
        return None

    @rule(agent=st.integers(0, AGENTS - 1))
    def review_next(self, agent: int) -> None:
        candidates = sorted(
            (t for t in range(TASKS) if self.model[t].review_open and self.review_refusal(t, agent) is None),
            key=lambda t: self.model[t].review_seq,
        )
        before = self.ledger()
        granted, code = self.call(lambda: review_claim_next(project=self.project, agent=self.agents[agent]))
        event(f"review_next: {code or ('ok' if granted else 'none')}")
        assert code is None, f"reviews/next: {code}"
        if granted is None:
            assert not candidates, f"reviews/next found nothing; tasks {candidates} were open for review"
            assert self.ledger() == before, "a reviews/next that found nothing wrote something"
            return
        assert candidates, f"reviews/next claimed {granted.grant.task.key}; nothing was open"
        assert granted.grant.task.pk == self.model[candidates[0]].pk
        self.record_grant(granted.grant, task=candidates[0], agent=agent, requested=None, kind=AttemptKind.REVIEW)

    @precondition(lambda self: any(t.review_open for t in self.model))
    @rule(data=st.data(), agent=st.integers(0, AGENTS - 1))
    def review_claim_by_id(self, data: st.DataObject, agent: int) -> None:
        task = data.draw(st.sampled_from([i for i, t in enumerate(self.model) if t.review_open]), label="task")
        request = ReviewRequest.objects.get(task_id=self.model[task].pk, status__in=PENDING_REVIEW_STATUSES)
        expected = self.review_refusal(task, agent)
        before = self.ledger()
        granted, code = self.call(lambda: review_claim(request=request, agent=self.agents[agent]))
        event(f"review_claim: {code or 'ok'}")
        assert code == expected, f"review claim of task {task} by agent {agent}: {code}, expected {expected}"
        if granted is None:
            assert self.ledger() == before, "a refused review claim wrote something"
            return
        self.record_grant(granted.grant, task=task, agent=agent, requested=None, kind=AttemptKind.REVIEW)

    @precondition(lambda self: any(a.kind == AttemptKind.REVIEW for a in self.attempts))
    @rule(data=st.data(), outcome=st.sampled_from(Outcome.REVIEW_DECISIONS))
    def review_decide(self, data: st.DataObject, outcome: str) -> None:
        case = self.draw_proof(data, kind=AttemptKind.REVIEW)

        def decide(proof: HolderProof) -> Any:
            return attempt_finish(proof=proof, outcome=outcome, result_summary="looked closely", findings=["one"])

        if self.expected_refusals(case):
            self.fenced(case, f"review {outcome}", decide)
            return
        task = self.model[case.attempt.task]
        stale = task.status != TaskStatus.REVIEW or (outcome == Outcome.APPROVED and task.review_moved)
        decided, code = self.call(lambda: decide(case.proof))
        event(f"review {outcome}: {code or 'ok'}{' (moved)' if task.review_moved else ''}")
        task.review_open = task.review_moved = False
        task.review_worker = None
        if stale:
            assert code == "STALE_REVIEW_TARGET", f"deciding a moved review target: {code}"
            if task.status == TaskStatus.REVIEW:
                task.status, task.ready_since = TaskStatus.READY, clock.now()
            self.end(case.attempt, AttemptStatus.RELEASED)
            return
        assert code is None, f"review {outcome}: {code}"
        task.status = {
            Outcome.APPROVED: TaskStatus.DONE,
            Outcome.CHANGES_REQUESTED: TaskStatus.READY,
            Outcome.BLOCKED: TaskStatus.BLOCKED,
        }[outcome]
        task.ready_since = clock.now() if task.status == TaskStatus.READY else None
        self.end(case.attempt, AttemptStatus.COMPLETED)
        assert decided is not None
        assert decided.task.status == task.status

    # --- invariants: plain reads of the database, after every step --------------

    @invariant()
    def at_most_one_active_attempt_per_task(self) -> None:
        attempts = self.ledger().attempts.values()
        active = Counter(row["task_id"] for row in attempts if row["status"] == AttemptStatus.ACTIVE)
        assert all(count == 1 for count in active.values()), active

    @invariant()
    def held_marks_exactly_the_tasks_with_an_active_attempt(self) -> None:
        ledger = self.ledger()
        active = {row["task_id"] for row in ledger.attempts.values() if row["status"] == AttemptStatus.ACTIVE}
        assert {task_id for task_id, task in ledger.tasks.items() if task["held"]} == active

    @invariant()
    def the_lease_clock_is_exactly_the_active_attempts_expiries(self) -> None:
        """SPEC §25: the sweep's narrow table (leases/models/lease_clock.py) mirrors the live leases."""
        attempts = self.ledger().attempts.values()
        active = {
            row["id"]: (row["task_id"], row["lease_expires_at"])
            for row in attempts
            if row["status"] == AttemptStatus.ACTIVE
        }
        rows = LeaseClock.objects.values_list("attempt_id", "task_id", "expires_at")
        clocks = {row[0]: (row[1], row[2]) for row in rows}
        assert clocks == active

    @invariant()
    def effective_status_follows_the_lease(self) -> None:
        now, ledger = clock.now(), self.ledger()
        live = {
            row["task_id"]: row["kind"]
            for row in ledger.attempts.values()
            if row["status"] == AttemptStatus.ACTIVE and row["lease_expires_at"] > now
        }
        for task_id, task in ledger.tasks.items():
            kind = live.get(task_id)
            expected = task["status"] if kind is None else IN_REVIEW if kind == AttemptKind.REVIEW else IN_PROGRESS
            assert task["effective_status"] == expected, (task, now)

    @invariant()
    def refused_holder_calls_were_fenced_and_wrote_nothing(self) -> None:
        calls, self.fenced_calls = self.fenced_calls, []
        for call in calls:
            assert call.code in call.expected, f"{call.description}: got {call.code}, expected {set(call.expected)}"
            assert call.wrote_only_what_was_allowed, f"{call.description} was refused but changed the ledger"

    @invariant()
    def renewals_never_shorten_a_lease(self) -> None:
        attempts = self.ledger().attempts.values()
        active = {row["id"]: row["lease_expires_at"] for row in attempts if row["status"] == AttemptStatus.ACTIVE}
        for attempt_id, expires in active.items():
            seen = self.lease_seen.get(attempt_id)
            assert seen is None or expires >= seen, f"attempt {attempt_id}: lease moved from {seen} to {expires}"
        self.lease_seen = active

    @invariant()
    def every_state_change_has_its_event(self) -> None:
        ledger = self.ledger()
        events = Counter((attempt_id, kind) for kind, attempt_id, _ in ledger.events if attempt_id is not None)
        finished_as = {
            attempt_id: status for kind, attempt_id, status in ledger.events if kind == EventType.ATTEMPT_FINISHED
        }
        for pk, attempt in ledger.attempts.items():
            status = attempt["status"]
            assert events[(pk, EventType.ATTEMPT_CLAIMED)] == 1, (
                f"attempt {pk}: {events[(pk, EventType.ATTEMPT_CLAIMED)]} claims"
            )
            terminal = {kind: events[(pk, kind)] for kind in TERMINAL_EVENT_TYPES if events[(pk, kind)]}
            if status == AttemptStatus.ACTIVE:
                assert terminal == {}, f"active attempt {pk} has terminal events {terminal}"
                assert attempt["finished_at"] is None, attempt
            else:
                assert terminal == {TERMINAL_EVENT[status]: 1}, f"{status} attempt {pk} has events {terminal}"
                assert attempt["finished_at"] is not None, attempt
            if TERMINAL_EVENT.get(status) == EventType.ATTEMPT_FINISHED:
                assert finished_as[pk] == status, (attempt, finished_as[pk])
        attempts_per_task = Counter(row["task_id"] for row in ledger.attempts.values())
        for task_id, task in ledger.tasks.items():
            assert task["epoch"] == attempts_per_task[task_id], (task, attempts_per_task[task_id])

    @invariant()
    def stored_status_is_never_in_progress(self) -> None:
        stored = {task["status"] for task in self.ledger().tasks.values()}
        assert IN_PROGRESS not in stored
        assert stored <= set(TaskStatus.values)

    @invariant()
    def no_approval_of_a_target_that_moved(self) -> None:
        """Every approved request was approved at the version it pinned: the approval's own status
        change (review → done, appended just before `review.approved`) is that version + 1."""
        approved = dict(ReviewRequest.objects.filter(status=ReviewStatus.APPROVED).values_list("pk", "task_version"))
        pending = Counter(
            ReviewRequest.objects.filter(status__in=PENDING_REVIEW_STATUSES).values_list("task_id", flat=True)
        )
        assert all(count == 1 for count in pending.values()), pending
        if not approved:
            return
        previous_of_task: dict[int, tuple[str, dict[str, Any]]] = {}
        seen = set()
        for task_id, kind, payload in Event.objects.order_by("id").values_list("task_id", "type", "payload"):
            if kind == EventType.REVIEW_APPROVED:
                before_kind, before_payload = previous_of_task[task_id]
                review = payload["review"]
                assert before_kind == EventType.TASK_STATUS_CHANGED, (review, before_kind)
                assert (before_payload["from"], before_payload["to"]) == ("review", "done"), before_payload
                assert before_payload["version"] == approved[review] + 1, ("approved a moved target", review)
                seen.add(review)
            if task_id is not None:
                previous_of_task[task_id] = (kind, payload)
        assert seen == set(approved), (seen, approved)

    @invariant()
    def database_agrees_with_the_model(self) -> None:
        ledger = self.ledger()
        assert set(ledger.attempts) == {a.pk for a in self.attempts}
        for attempt in self.attempts:
            row = ledger.attempts[attempt.pk]
            assert (row["task_id"], row["agent_id"], row["epoch"]) == (
                self.model[attempt.task].pk,
                self.agents[attempt.agent].pk,
                attempt.epoch,
            )
            assert row["status"] == attempt.status, (row, attempt)
            assert row["kind"] == attempt.kind, (row, attempt)
            assert row["lease_expires_at"] == attempt.expires_at, (row, attempt)
            assert ledger.notes[attempt.pk] == attempt.notes, (row, attempt)
        for model in self.model:
            row = ledger.tasks[model.pk]
            assert row["status"] == model.status, (row, model)
            assert row["epoch"] == model.epoch, (row, model)
            assert row["ready_since"] == model.ready_since, (row, model)
            expected_reservation = None if model.reserved_for is None else self.agents[model.reserved_for].pk
            assert row["reserved_for_id"] == expected_reservation, (row, model)


@pytest.mark.django_db
def test_lease_rules_hold_after_every_step():
    run_state_machine_as_test(
        LeaseMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            report_multiple_bugs=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
    # Every example was rolled back at its teardown.
    assert not Project.objects.exists()
    assert not Attempt.objects.exists()
