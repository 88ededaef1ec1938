"""Claim-next: the project's next claimable task, for whoever asks first (SPEC §3, §4, §20).

Candidates come in claim-next order (priority, then age), each locked as it is read (SKIP LOCKED:
agents do not queue on one row), from two sources each read by its own index, so held tasks are never
walked past however many there are (SPEC §25, `_heads`) and claimed by `leases.services.claims.claim_locked`, which
re-verifies it; a candidate refused there (taken meanwhile, not claimable, its paths reserved) is
walked past, at most CLAIM_NEXT_MAX_CANDIDATES of them. On SQLite a read outside any transaction
answers "nothing" without taking the one write lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F, Q, QuerySet, Subquery

from core.db import write_transaction
from core.errors import PathsReserved, TaskNotClaimable, TaskTaken
from core.prepared import SAMPLE_INT, SAMPLE_TIME, Prepared
from leases.selectors import HOLDS_FREE, HOLDS_LAPSED, claimable_tasks
from leases.services.claim_state import ClaimRequest, claim_state, validate_claim_request
from leases.services.claims import ClaimCollided, LeaseGrant, claim_locked, refuse_inactive
from leases.services.tallies import tally_claim_refusal
from leases.services.usage import claim_budget_refusal
from ledger import clock
from ledger.models import Agent, Project, Task

# Claim-next re-verifies each locked candidate; this bounds the walk.
CLAIM_NEXT_MAX_CANDIDATES = 64


def _heads(
    *,
    project: Project,
    agent: Agent,
    now: datetime,
    passed_over: Sequence[int],
    lock: bool,
    task_class: str | None = None,
) -> Q:
    """The head of each of claim-next's two sources (SPEC §25), each its own subquery, planned alone.

    Free: the first ready task nobody holds, read in order from the index `task_claim_queue` (held tasks
    are not in it, so none is walked past), locked as it is read (SKIP LOCKED: agents do not queue).
    Lapsed: the first task held by a lease that lapsed unexpired (at most LAPSED_CANDIDATES, read from the
    active-expiry index), which a claim expires and takes (SPEC §3).
    """
    heads = []
    for holds in (HOLDS_FREE, HOLDS_LAPSED):
        tasks = claimable_tasks(project=project, now=now, agent=agent, task_class=task_class, holds=holds)
        if passed_over:
            tasks = tasks.exclude(pk__in=passed_over)
        if lock and holds == HOLDS_FREE:
            tasks = tasks.select_for_update(skip_locked=True, no_key=True, of=("self",))
        heads.append(Q(pk=Subquery(tasks.values("pk")[:1])))
    return heads[0] | heads[1]


def _candidates(
    *, project: Project, agent: Agent, now: datetime, task_class: str | None = None, passed_over: Sequence[int] = ()
) -> QuerySet[Task]:
    """Claim-next's candidate: the better of the two heads in claim-next order, locked (SKIP LOCKED)."""
    heads = _heads(project=project, agent=agent, now=now, task_class=task_class, passed_over=passed_over, lock=True)
    return (
        Task.objects.filter(heads)
        .order_by(F("priority").desc(), F("ready_since").asc(), "id")
        .select_related("project")
        .select_for_update(skip_locked=True, no_key=True, of=("self",))
    )


def _candidate_values(*, project: Project, agent: Agent, now: datetime, task_class: str | None) -> dict[str, Any]:
    """The values of claim-next's candidate statements (a task class only when one is asked for)."""
    return {"project": project, "agent": agent, "now": now, **({"task_class": task_class} if task_class else {})}


def _candidate_statement(build: Callable[..., QuerySet[Task, Any]], *, by_class: bool) -> Prepared[Task]:
    first, second = (
        _candidate_values(
            project=Project(pk=SAMPLE_INT[index]),
            agent=Agent(pk=SAMPLE_INT[1 - index]),
            now=SAMPLE_TIME[index],
            task_class=f"sample-class-{index}" if by_class else None,
        )
        for index in (0, 1)
    )
    return Prepared(build, samples=(first, second))


# The first candidate, with and without a task class, compiled once (SPEC §20); a walk past a
# candidate builds its query afresh (the excluded list changes the statement).
_FIRST_CANDIDATE = {
    by_class: _candidate_statement(lambda **values: _candidates(**values)[:1], by_class=by_class)
    for by_class in (False, True)
}


# Whether anything is claimable, read without a lock (`_nothing_to_claim`).
_ANY_CANDIDATE = {
    by_class: _candidate_statement(
        lambda **values: Task.objects.filter(_heads(**values, passed_over=(), lock=False)).values_list("pk")[:1],
        by_class=by_class,
    )
    for by_class in (False, True)
}


def any_candidate_read(*, columns: Mapping[str, str], using: str = "default") -> Any:
    """`_nothing_to_claim`'s read (without a task class), its project and agent taken from columns of an
    enclosing statement (`{"project": ..., "agent": ...}`) and its `now` left a parameter: authentication's
    statement embeds it for a plain claim-next (`api.principal_row`), which is then one statement when it
    finds nothing (SPEC §24's fleet: most claims find nothing)."""
    return _ANY_CANDIDATE[False].compiled(using).with_columns(columns)


def _nothing_to_claim(
    *, project: Project, agent: Agent, task_class: str | None, claimable_read: bool | None = None
) -> bool:
    """Whether a read outside any transaction finds nothing claimable, so claim-next can answer
    "nothing" without a transaction (SPEC §20: in a fleet most claims find nothing). On SQLite that
    spares the database's one write lock; on PostgreSQL an empty claim-next is then authentication
    and this read, two round trips instead of four (BEGIN and COMMIT around the locking read), at
    one round trip more for a claim that finds a candidate. Only a read that finds nothing decides
    (the answer is true as of that read); one that finds a candidate goes on to the claim, which
    decides afresh. An agent or project whose daily budget is spent is still told so.

    `claimable_read`: what the same read found a moment ago in this request, outside any transaction
    (authentication's statement, `any_candidate_read`); it decides as this one would have, with no
    statement of its own: a plain claim-next over HTTP that finds nothing is then one round trip, and
    one that finds a candidate no longer pays the read twice. None: not read.
    """
    if connection.in_atomic_block:
        return False
    now = clock.now()
    if claim_budget_refusal(task=None, agent=agent, project=project, now=now, scopes=("agent", "project")):
        return False
    if claimable_read is not None:
        return not claimable_read
    values = _candidate_values(project=project, agent=agent, now=now, task_class=task_class)
    return not _ANY_CANDIDATE[bool(task_class)].rows(**values)


def anything_to_claim(*, project: Project, agent: Agent, task_class: str | None = None) -> bool:
    """Whether claim-next would go on to claim (`_nothing_to_claim`'s one compiled read, outside any
    transaction): the claim wait's look before a try, at a wake and at its deadline (`api.claim_wait`), so an
    idle fleet's parked claims cost one statement each, not a claim's write transaction or a queryset built
    afresh. True inside a transaction, and when a budget is spent (the claim answers that)."""
    return not _nothing_to_claim(project=project, agent=agent, task_class=task_class)


@write_transaction
def _claim_next(
    *, project: Project, agent: Agent, task_class: str | None, request: ClaimRequest
) -> LeaseGrant | TaskTaken | None:
    now = clock.now()
    daily = claim_budget_refusal(task=None, agent=agent, project=project, now=now, scopes=("agent", "project"))
    if daily is not None:
        raise daily
    values = _candidate_values(project=project, agent=agent, now=now, task_class=task_class)
    passed_over: list[int] = []
    reserved: list[int] = []
    for _ in range(CLAIM_NEXT_MAX_CANDIDATES):
        # The row comes back locked (SKIP LOCKED) and as locked: its own columns are current.
        if passed_over:
            candidate = _candidates(**values, passed_over=passed_over).first()
        else:
            candidate = _FIRST_CANDIDATE[bool(task_class)].first(**values)
        if candidate is None:
            break
        # The candidate query's NOT EXISTS saw its statement's snapshot; a claim
        # that committed since is only visible to a new statement. Re-verify.
        try:
            return claim_locked(claim_state(candidate), agent=agent, now=now, request=request, budget_scopes=("task",))
        except ClaimCollided:
            raise  # the transaction is spoiled; the caller sees TASK_TAKEN
        except PathsReserved:
            reserved.append(candidate.pk)
            passed_over.append(candidate.pk)
        except (TaskTaken, TaskNotClaimable):
            passed_over.append(candidate.pk)
    if passed_over and len(reserved) < len(passed_over):
        # Returned, not raised: a candidate quarantined on the way (SPEC §16.4) stays quarantined.
        return TaskTaken(
            "Every claimable task was taken by another agent meanwhile; ask again.",
            details={"project": project.slug, "passed_over": len(passed_over)},
        )
    return None


def lease_claim_next(
    *,
    project: Project,
    agent: Agent,
    task_class: str | None = None,
    lease_seconds: int | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    environment: str | None = None,
    environment_kind: str | None = None,
    paths: Sequence[str] | None = None,
    paths_mode: str | None = None,
    claimable_read: bool | None = None,
) -> LeaseGrant | None:
    """Claim the project's next claimable task (priority, then age); None when there is none.

    On PostgreSQL candidates are taken with FOR NO KEY UPDATE SKIP LOCKED, so
    agents do not queue on one row; on SQLite the IMMEDIATE transaction
    serializes. Environment refusals are not "taken": they end the call.
    Candidates whose paths are reserved by another live attempt are walked
    past; when they were all that was left the answer is None (SPEC §19). An
    agent or project whose budget for the day is spent gets TASK_NOT_CLAIMABLE
    (reason `budget`); a task whose own budget is spent is not a candidate. `claimable_read`: whether
    this request's read just now, outside any transaction, found anything claimable (`_nothing_to_claim`).
    """
    request = validate_claim_request(
        ClaimRequest(
            lease_seconds,
            branch,
            base_commit,
            environment,
            environment_kind,
            None if paths is None else tuple(paths),
            paths_mode,
        )
    )
    refuse_inactive(agent)
    if _nothing_to_claim(project=project, agent=agent, task_class=task_class, claimable_read=claimable_read):
        return None
    try:
        granted = _claim_next(project=project, agent=agent, task_class=task_class, request=request)
        if isinstance(granted, TaskTaken):
            raise granted
    except TaskTaken:
        tally_claim_refusal(project_id=project.pk, agent=agent)
        raise
    return granted
