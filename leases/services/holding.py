"""Holding a lease: the proof every holder call presents, the fencing, and renewals.

Every holder call presents a `HolderProof` (attempt id, token, epoch) and is
fenced (SPEC §3) by `held_attempt`: the token is the lease token or the
command's attempt token (SPEC §23.2); wrong token → `INVALID_LEASE_TOKEN`; an
epoch older than the task's → `STALE_EPOCH`; an attempt no longer active →
`LEASE_NOT_HELD` (or `LEASE_EXPIRED` when it expired); a lapsed lease is
expired in the same transaction, which commits, and the call answers
`LEASE_EXPIRED`. Holder writes are heartbeats: each extends the lease through
`extend_lease`, never shortening it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import connection
from django.db.models import F, QuerySet

from core.combined import combines
from core.db import run_at_once, write_transaction
from core.errors import (
    InvalidLeaseToken,
    LeaseExpired,
    LeaseNotHeld,
    LedgerError,
    NotFound,
    StaleEpoch,
    ValidationFailed,
)
from core.prepared import SAMPLE_INT, SAMPLE_TIME, Prepared, PreparedUpdate
from leases.models import Attempt, AttemptStatus
from leases.selectors import blockers_of_attempts_task, clamp_lease_seconds, comments_since_claim
from leases.services.expiry import expire_lapsed
from leases.services.usage import Usage, budget_refusal, validate_usage
from leases.tokens import lease_token_matches
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, Project, Task
from ledger.tokens import hash_token

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class HolderProof:
    """What a holder call presents: its attempt, the lease token, the epoch; and who calls."""

    attempt_id: int
    token: str
    epoch: int
    agent: Agent


def refusals_after_commit(func: Callable[P, R | LedgerError]) -> Callable[P, R]:
    """Run a holder transaction; a refusal it *returns* is raised after its writes commit.

    Lets a call that found a lapsed lease expire the attempt (and keep that)
    while still answering `LEASE_EXPIRED`.
    """
    transactional = write_transaction(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        result = transactional(*args, **kwargs)
        if isinstance(result, LedgerError):
            raise result
        return result

    return wrapper


# The attempt's and the task's fields the fencing (`held_attempt`) and the extension (`extend_lease`) read:
# the full path loads them (`_LEASE_FIELDS`), the one-statement path returns them (`_EXTENDED_ATTEMPT`,
# `_EXTENDED_TASK`).
_FENCED_ATTEMPT_FIELDS = (
    "id",
    "task",
    "agent",
    "epoch",
    "status",
    "token_hash",
    "command_token_hash",
    "lease_seconds",
    "lease_expires_at",
    "last_renewed_at",
    "renew_count",
)
_FENCED_TASK_FIELDS = ("key", "epoch", "status")

# What renew and note read: the fencing, the lease, and the task and project their event names.
_LEASE_FIELDS = (
    *_FENCED_ATTEMPT_FIELDS,
    *(f"task__{name}" for name in _FENCED_TASK_FIELDS),
    "task__project__id",
    # SPEC §19: the budgets a holder write is checked against (the agent's come with the proof).
    "task__budget_tokens",
    "task__budget_cost_usd",
    "task__project__slug",
    "task__project__daily_budget_tokens",
    "task__project__daily_budget_cost_usd",
)


def _held_attempt_query(
    *, lock_task: bool, lean: bool, count_comments: bool, count_blockers: bool
) -> Prepared[Attempt]:
    def build(attempt_id: int, agent_id: int) -> QuerySet[Attempt]:
        lock_of = ("self", "task") if lock_task else ("self",)
        attempts: QuerySet[Attempt] = (
            Attempt.objects.select_for_update(no_key=True, of=lock_of)
            .select_related("task__project")
            .filter(pk=attempt_id, agent_id=agent_id)
        )
        if count_comments:
            attempts = attempts.annotate(new_comments=comments_since_claim())
        if count_blockers:
            attempts = attempts.annotate(task_blocked_by=blockers_of_attempts_task())
        return (attempts.only(*_LEASE_FIELDS) if lean else attempts).order_by("pk")[:1]

    return Prepared(
        build,
        samples=(
            {"attempt_id": SAMPLE_INT[0], "agent_id": SAMPLE_INT[1]},
            {"attempt_id": SAMPLE_INT[1], "agent_id": SAMPLE_INT[0]},
        ),
    )


# The shapes holder calls use: (lock_task, lean, count_comments, count_blockers), each compiled once,
# at its first use (SPEC §20).
_HELD_QUERIES = {
    (lock_task, lean, count_comments, count_blockers): _held_attempt_query(
        lock_task=lock_task, lean=lean, count_comments=count_comments, count_blockers=count_blockers
    )
    for lock_task in (False, True)
    for lean in (False, True)
    for count_comments in (False, True)
    for count_blockers in (False, True)
}


def held_attempt(
    proof: HolderProof,
    *,
    now: datetime,
    lock_task: bool,
    lean: bool = False,
    count_comments: bool = False,
    count_blockers: bool = False,
) -> Attempt | LeaseExpired:
    """The proof's attempt, locked, if it holds a live lease; else a refusal.

    The agent is not read: the attempt is looked up by the proof's agent, so
    it is that one. `lean` (renew, note) reads only `_LEASE_FIELDS`; any other
    field loads on first access. Otherwise the attempt, its task and project
    come whole, for the calls that end the attempt or write the task.
    `count_comments` (renew) reads `new_comments`, the task's comments since
    the claim (SPEC §16.2), in the same statement; `count_blockers` (finish)
    reads `task_blocked_by`, its task's unresolved blockers, for the answer
    (finishing a task changes the blockers of the tasks it blocks, never its own).
    """
    query = _HELD_QUERIES[(lock_task, lean, count_comments, count_blockers)]
    attempt = query.first(attempt_id=proof.attempt_id, agent_id=proof.agent.pk)
    if attempt is None:
        raise NotFound(f"No attempt {proof.attempt_id} of yours.", details={"attempt": proof.attempt_id})
    attempt.agent = proof.agent
    if not proves_holding(proof.token, attempt):
        raise InvalidLeaseToken(details={"attempt": attempt.pk})
    if attempt.status == AttemptStatus.REVOKED:
        # SPEC §3: "The revoked holder's next write fails with LEASE_NOT_HELD",
        # even when the task was claimed again since: a person stopped it.
        raise LeaseNotHeld(
            f"Attempt {attempt.pk} was revoked: stop working on it.",
            details={"attempt": attempt.pk, "status": attempt.status},
        )
    task_epoch = attempt.task.epoch
    if proof.epoch < task_epoch or (attempt.status != AttemptStatus.ACTIVE and task_epoch > attempt.epoch):
        # The write is stale either because it presents an old epoch or because its
        # attempt is of one (a later claim took the task): name the stale one.
        stale = min(proof.epoch, attempt.epoch)
        raise StaleEpoch(
            f"{attempt.task.key} is at epoch {task_epoch}; attempt {attempt.pk} is of epoch {stale}.",
            details={
                "attempt": attempt.pk,
                "presented_epoch": proof.epoch,
                "attempt_epoch": attempt.epoch,
                "current_epoch": task_epoch,
            },
        )
    if proof.epoch != attempt.epoch:
        raise ValidationFailed(
            f"Attempt {attempt.pk} has epoch {attempt.epoch}, not {proof.epoch}.",
            details={"attempt": attempt.pk, "epoch": attempt.epoch},
        )
    if attempt.status == AttemptStatus.EXPIRED:
        raise LeaseExpired(details={"attempt": attempt.pk, "status": attempt.status})
    if attempt.status != AttemptStatus.ACTIVE:
        raise LeaseNotHeld(
            f"Attempt {attempt.pk} is {attempt.status}.", details={"attempt": attempt.pk, "status": attempt.status}
        )
    if attempt.lease_expires_at <= now:
        expire_lapsed([attempt.pk], now=now)
        return LeaseExpired(
            f"The lease of attempt {attempt.pk} lapsed at {attempt.lease_expires_at.isoformat()}.",
            details={"attempt": attempt.pk, "status": AttemptStatus.EXPIRED},
        )
    return attempt


def proves_holding(token: str, attempt: Attempt) -> bool:
    """The attempt's lease token, or the attempt token its holder minted for its command (SPEC §23.2)."""
    if lease_token_matches(token, attempt.token_hash):
        return True
    return bool(attempt.command_token_hash) and lease_token_matches(token, attempt.command_token_hash)


def _extend_update(*, renewal: bool) -> PreparedUpdate:
    def build(attempt_id: int, expires: datetime, now: datetime) -> tuple[QuerySet[Attempt], dict[str, Any]]:
        work: dict[str, Any] = {} if renewal else {"last_worked_at": now}
        changes = {
            "lease_expires_at": expires,
            "last_renewed_at": now,
            "renew_count": F("renew_count") + (1 if renewal else 0),
            **work,
        }
        return Attempt.objects.filter(pk=attempt_id), changes

    return PreparedUpdate(
        build,
        samples=(
            {"attempt_id": SAMPLE_INT[0], "expires": SAMPLE_TIME[0], "now": SAMPLE_TIME[1]},
            {"attempt_id": SAMPLE_INT[1], "expires": SAMPLE_TIME[1], "now": SAMPLE_TIME[0]},
        ),
    )


_EXTEND = {renewal: _extend_update(renewal=renewal) for renewal in (False, True)}


def extend_lease(attempt: Attempt, *, now: datetime, seconds: int, renewal: bool) -> datetime:
    """Push the lease to at least now + seconds; never shorter (the attempt is locked).

    A holder write that is not a renewal (a note, git facts, a task update)
    is work: it moves `last_worked_at`, which `stalled_attempt` reads.
    """
    expires = max(attempt.lease_expires_at, now + timedelta(seconds=seconds))
    _EXTEND[renewal].run(attempt_id=attempt.pk, expires=expires, now=now)
    attempt.lease_expires_at = expires
    attempt.last_renewed_at = now
    if renewal:
        attempt.renew_count += 1
    else:
        attempt.last_worked_at = now
    return expires


# The attempt's and the task's columns a fenced extension returns (`fenced_extension`); the others load on
# access. In the models' field order, as `Model.from_db` takes them.
_EXTENDED_ATTEMPT = tuple(
    field.attname
    for field in Attempt._meta.concrete_fields
    if field.name in {*_FENCED_ATTEMPT_FIELDS, "last_worked_at"}
)
_EXTENDED_TASK = tuple(
    field.attname for field in Task._meta.concrete_fields if field.name in {"id", *_FENCED_TASK_FIELDS, "project"}
)
# Their names in the statement's rows (a CTE over it reads `held.a_id`, `held.t_project_id`).
EXTENDED_COLUMNS = ", ".join([f"a_{name}" for name in _EXTENDED_ATTEMPT] + [f"t_{name}" for name in _EXTENDED_TASK])


def fenced_extension(
    proof: HolderProof, *, now: datetime, seconds: int | None, renewal: bool
) -> tuple[str, list[Any]] | None:
    """PostgreSQL: `held_attempt`'s success and `extend_lease` as one conditional UPDATE … RETURNING
    (`_EXTENDED_ATTEMPT`, then `_EXTENDED_TASK`), or None where it does not apply.

    It updates the row only when `held_attempt` would return it and no budget could refuse the call:
    the proof's attempt and agent, its lease or attempt token, active, of the presented epoch (the
    task's not newer), its lease live at `now`; no budget on the task, the agent or the project (SPEC
    §19; the agent's come with the proof). It locks the attempt alone, as `held_attempt` does for a
    renewal or a note, and a concurrent change of the attempt is re-checked on its new version (READ
    COMMITTED). When it updates nothing the caller runs the full path, which says why (the same
    refusal, code and details as ever). SQLite (None) always runs the full path: in-process, it has no
    round trips to save.
    """
    agent = proof.agent
    if not combines() or agent.daily_budget_tokens is not None or agent.daily_budget_cost_usd is not None:
        return None
    quote = connection.ops.quote_name
    returned = ", ".join(
        [f"a.{quote(name)} AS a_{name}" for name in _EXTENDED_ATTEMPT]
        + [f"t.{quote(name)} AS t_{name}" for name in _EXTENDED_TASK]
    )
    work = "" if renewal else ", last_worked_at = %s"
    # Only the models' own table names and the fixed text above go into the statement; values are parameters.
    sql = f"""UPDATE {Attempt._meta.db_table} AS a SET
        lease_expires_at = GREATEST(a.lease_expires_at, %s + COALESCE(%s, a.lease_seconds) * interval '1 second'),
        last_renewed_at = %s, renew_count = a.renew_count + %s{work}
    FROM {Task._meta.db_table} AS t, {Project._meta.db_table} AS p
    WHERE a.id = %s AND a.agent_id = %s AND (a.token_hash = %s OR a.command_token_hash = %s)
      AND a.status = %s AND a.epoch = %s AND a.lease_expires_at > %s
      AND t.id = a.task_id AND t.epoch <= %s AND p.id = t.project_id
      AND t.budget_tokens IS NULL AND t.budget_cost_usd IS NULL
      AND p.daily_budget_tokens IS NULL AND p.daily_budget_cost_usd IS NULL
    RETURNING {returned}"""  # noqa: S608
    token_hash = hash_token(proof.token)
    params: list[Any] = [now, seconds, now, 1 if renewal else 0, *([] if renewal else [now])]
    params += [proof.attempt_id, agent.pk, token_hash, token_hash, AttemptStatus.ACTIVE, proof.epoch, now, proof.epoch]
    return sql, params


def extended_attempt(row: Sequence[Any], proof: HolderProof) -> Attempt:
    """The attempt (and its task) of a fenced extension's returned row; other fields load on access."""
    split = len(_EXTENDED_ATTEMPT)
    attempt = Attempt.from_db("default", list(_EXTENDED_ATTEMPT), list(row[:split]))
    task_row = row[split : split + len(_EXTENDED_TASK)]
    attempt.task = Task.from_db("default", list(_EXTENDED_TASK), list(task_row))
    attempt.agent = proof.agent
    return attempt


def _renewed_at_once(proof: HolderProof, *, now: datetime, seconds: int | None) -> Attempt | None:
    """The renewal as one statement without a transaction (PostgreSQL), with the comments since the
    claim (SPEC §16.2); None when it updated nothing or does not apply (the caller runs the full path)."""
    statement = fenced_extension(proof, now=now, seconds=seconds, renewal=True)
    if statement is None:
        return None
    sql, params = statement
    comments = _COMMENTS_SINCE_CLAIM.compiled()
    sql = f"{sql}, ({comments.sql})"
    params += comments.params_for({"attempt_id": proof.attempt_id})
    rows = run_at_once(sql, params)
    if not rows:
        return None
    attempt = extended_attempt(rows[0], proof)
    attempt.new_comments = rows[0][-1]  # type: ignore[attr-defined]
    return attempt


# The comments since the claim (`comments_since_claim`), as a column of the renewal's one statement.
_COMMENTS_SINCE_CLAIM: Prepared[Attempt] = Prepared(
    lambda attempt_id: (
        Attempt.objects.filter(pk=attempt_id).annotate(new_comments=comments_since_claim()).values_list("new_comments")
    ),
    samples=({"attempt_id": SAMPLE_INT[0]}, {"attempt_id": SAMPLE_INT[1]}),
)


def attempt_renew(*, proof: HolderProof, lease_seconds: int | None = None, usage: Any = None) -> Attempt:
    """Heartbeat: extend the lease by `lease_seconds` (clamped) or the attempt's own length.

    The returned attempt's `task.status` is the task's stored status as of
    this renewal: a task cancelled under a live lease keeps the lease (the
    holder may still checkpoint and release it), and the renewal is how the
    holder learns of the cancellation. `usage` is added to the totals first;
    a spent budget then answers BUDGET_EXHAUSTED and the lease is not
    extended (SPEC §19).

    On PostgreSQL a renewal without usage is first tried as one conditional
    statement outside any transaction (`fenced_extension`); the full path
    below runs when that one does not renew (a refusal, a budget) or does not apply.
    """
    if lease_seconds is not None and (not isinstance(lease_seconds, int) or lease_seconds <= 0):
        raise ValidationFailed("lease_seconds must be a positive integer.")
    spent = validate_usage(usage)
    now = clock.now()
    if spent is None or spent.is_empty():
        seconds = clamp_lease_seconds(lease_seconds) if lease_seconds is not None else None
        renewed = _renewed_at_once(proof, now=now, seconds=seconds)
        if renewed is not None:
            return renewed
    return _attempt_renew(proof=proof, lease_seconds=lease_seconds, spent=spent, now=now)


@refusals_after_commit
def _attempt_renew(
    *, proof: HolderProof, lease_seconds: int | None, spent: Usage | None, now: datetime
) -> Attempt | LedgerError:
    held = held_attempt(proof, now=now, lock_task=False, lean=True, count_comments=True)
    if isinstance(held, LedgerError):
        return held
    refusal = budget_refusal(held, spent, now=now, actor=Actor(agent=held.agent))
    if refusal is not None:
        return refusal
    seconds = clamp_lease_seconds(lease_seconds) if lease_seconds is not None else held.lease_seconds
    extend_lease(held, now=now, seconds=seconds, renewal=True)
    return held
