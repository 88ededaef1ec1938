"""The operations the workloads repeat, each as a service call and as a replayable raw trace.

For each operation: how to call the service, the values its symbols had in
that call (to bind the captured parameters), which symbols come back from
the database (by column name), and how the raw loop derives the rest.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.capture import Trace, capture, symbolize
from bench.replay import RawConnection, Symbols

LEASE_SECONDS = 900  # the project default the bench uses
NOTE_CONTENT = "Checkpoint: migrated the search index; tests green locally. Next: wire the API and the admin filter."
NOTE_STEPS = ["wire the API", "admin filter"]


@dataclass
class Holder:
    """What one agent carries between the operations of a cycle (service side)."""

    agent: Any
    project: Any
    grant: Any = None

    @property
    def proof(self) -> Any:
        from leases.services import HolderProof

        return HolderProof(
            attempt_id=self.grant.attempt.pk, token=self.grant.token, epoch=self.grant.attempt.epoch, agent=self.agent
        )


@dataclass
class OpSpec:
    name: str
    call: Callable[[Holder], Any]  # the service call; returns what capture_symbols reads
    capture_symbols: Callable[[Holder, Any, Callable[[datetime], Any]], dict[str, Any]]
    results: dict[str, str] = field(default_factory=dict)
    hints: dict[str, set[str]] = field(default_factory=dict)
    raw_inputs: Callable[[Symbols, RawConnection], None] = lambda symbols, raw: None
    derive: Callable[[Symbols], None] | None = None


# --- claim-next -------------------------------------------------------------------------


def _claim_next(holder: Holder) -> Any:
    from leases.services import lease_claim_next

    holder.grant = lease_claim_next(project=holder.project, agent=holder.agent)
    return holder.grant


def _claim_symbols(holder: Holder, grant: Any, adapt: Callable[[datetime], Any]) -> dict[str, Any]:
    attempt = grant.attempt
    return {
        "project_id": holder.project.pk,
        "agent_id": holder.agent.pk,
        "handle": holder.agent.handle,
        "now": adapt(attempt.claimed_at),
        "expires": adapt(attempt.lease_expires_at),
        "token_hash": attempt.token_hash,
        "token_salt": attempt.token_salt,
        "branch": attempt.branch,
        "label": attempt.label,
        "task_id": grant.task.pk,
        "key": grant.task.key,
        "epoch_before": attempt.epoch - 1,
        "epoch": attempt.epoch,
        "version": attempt.task_version_at_claim,
        "event_id_at_claim": attempt.event_id_at_claim,
        "attempt_id": attempt.pk,
    }


def _claim_inputs(symbols: Symbols, raw: RawConnection) -> None:
    now = datetime.now(UTC)
    symbols["now"] = raw.adapt_datetime(now)
    symbols["expires"] = raw.adapt_datetime(now + timedelta(seconds=LEASE_SECONDS))
    symbols["token_hash"] = secrets.token_hex(32)
    symbols["token_salt"] = secrets.token_hex(16)
    for name in ("task_id", "key", "epoch_before", "epoch", "version", "event_id_at_claim", "attempt_id"):
        symbols.pop(name, None)


def _claim_derive(symbols: Symbols) -> None:
    if "epoch_before" in symbols and "epoch" not in symbols:
        symbols["epoch"] = symbols["epoch_before"] + 1
    if "key" in symbols and "epoch" in symbols:
        key = symbols["key"]
        symbols["branch"] = f"claude/{key.lower()}-bench-task"
        symbols["label"] = (
            f"owner={symbols['handle']};branch={symbols['branch']};env=-;task={key};epoch={symbols['epoch']}"
        )


CLAIM_NEXT = OpSpec(
    name="claim_next",
    call=_claim_next,
    capture_symbols=_claim_symbols,
    results={
        "task_id": "id",
        "key": "key",
        "epoch_before": "epoch",
        "version": "version",
        "event_id_at_claim": "last_event_id",
        "attempt_id": "id",
    },
    hints={"epoch": {"epoch"}, "version": {"task_version_at_claim"}, "event_id_at_claim": {"event_id_at_claim"}},
    # The claim reads a second statement (the latest attempt's state) only for a task that
    # had an attempt; the capture is of a fresh task, so a replay that meets a live attempt
    # collides on the one-active index and counts it as taken, as the service would.
    raw_inputs=_claim_inputs,
    derive=_claim_derive,
)


# --- holder calls -----------------------------------------------------------------------


def _now_inputs(symbols: Symbols, raw: RawConnection) -> None:
    now = datetime.now(UTC)
    symbols["now"] = raw.adapt_datetime(now)
    symbols["now2"] = symbols["now"]
    symbols["expires"] = raw.adapt_datetime(now + timedelta(seconds=LEASE_SECONDS))


def _holder_symbols(holder: Holder) -> dict[str, Any]:
    return {
        "attempt_id": holder.grant.attempt.pk,
        "agent_id": holder.agent.pk,
        "task_id": holder.grant.task.pk,
        "project_id": holder.project.pk,
        "epoch": holder.grant.attempt.epoch,
        # PostgreSQL's one-statement renew and note compare the lease token's hash in SQL: the raw
        # claim's own (`_claim_inputs`) is the one its replay presents.
        "token_hash": holder.grant.attempt.token_hash,
    }


def _renew(holder: Holder) -> Any:
    from leases.services import attempt_renew

    return attempt_renew(proof=holder.proof)


RENEW = OpSpec(
    name="renew",
    call=_renew,
    capture_symbols=lambda holder, attempt, adapt: {
        **_holder_symbols(holder),
        "now": adapt(attempt.last_renewed_at),
        "expires": adapt(attempt.lease_expires_at),
    },
    raw_inputs=_now_inputs,
)


def _note(holder: Holder) -> Any:
    from leases.services import note_add

    return note_add(proof=holder.proof, kind="checkpoint", content=NOTE_CONTENT, next_steps=NOTE_STEPS)


NOTE = OpSpec(
    name="note",
    call=_note,
    capture_symbols=lambda holder, written, adapt: {
        **_holder_symbols(holder),
        "now": adapt(written.note.created_at),
        "expires": adapt(written.lease_expires_at),
        "note_id": written.note.pk,
    },
    results={"note_id": "id"},
    hints={"note_id": {"note"}},
    raw_inputs=_now_inputs,
)


def _finish(outcome: str) -> Callable[[Holder], Any]:
    def call(holder: Holder) -> Any:
        from leases.services import attempt_finish

        extra = {"interruption_reason_code": "handoff"} if outcome == "handoff" else {}
        return attempt_finish(proof=holder.proof, outcome=outcome, result_summary="bench", **extra)

    return call


def _finish_symbols(holder: Holder, finished: Any, adapt: Callable[[datetime], Any]) -> dict[str, Any]:
    symbols = {**_holder_symbols(holder), "now": adapt(finished.attempt.finished_at)}
    if finished.task.updated_at != finished.attempt.finished_at:
        symbols["now2"] = adapt(finished.task.updated_at)
    if finished.task.version != holder.grant.task.version:
        symbols["version"] = holder.grant.task.version
        symbols["new_version"] = finished.task.version
    return symbols


def _finish_derive(symbols: Symbols) -> None:
    if "version" in symbols:
        symbols["new_version"] = symbols["version"] + 1


def finish_spec(outcome: str) -> OpSpec:
    return OpSpec(
        name=f"finish_{outcome}",
        call=_finish(outcome),
        capture_symbols=_finish_symbols,
        results={"version": "version"},
        hints={"new_version": {"version"}, "version": {"version"}},
        raw_inputs=_now_inputs,
        derive=_finish_derive,
    )


FINISH_DONE = finish_spec("done")
FINISH_HANDOFF = finish_spec("handoff")


# --- capture ------------------------------------------------------------------------------


def datetime_adapter() -> Callable[[datetime], Any]:
    """Datetimes as Django hands them to the driver (SQLite gets strings)."""
    from django.db import connection

    return connection.ops.adapt_datetimefield_value


@dataclass
class CapturedOp:
    spec: OpSpec
    trace: Trace
    logged: list[str]  # the statements as CaptureQueriesContext logged them
    result: Any


def capture_cycle(holder: Holder, specs: list[OpSpec]) -> list[CapturedOp] | None:
    """Run one cycle of `specs` through the services under capture; None if the first op found nothing."""
    adapt = datetime_adapter()
    captured = []
    for spec in specs:
        result, trace = capture(functools.partial(spec.call, holder))
        if result is None:
            return None
        symbols = spec.capture_symbols(holder, result, adapt)
        replay = symbolize(spec.name, trace, symbols=symbols, results=spec.results, hints=spec.hints)
        captured.append(CapturedOp(spec=spec, trace=replay, logged=trace.logged, result=result))
    return captured


@dataclass
class RawAgent:
    """What one raw-loop agent carries between the traces of a cycle."""

    raw: RawConnection
    symbols: dict[str, Any]


def raw_agent(raw: RawConnection, *, agent: Any, project: Any) -> RawAgent:
    return RawAgent(raw=raw, symbols={"agent_id": agent.pk, "handle": agent.handle, "project_id": project.pk})


def raw_op(agent: RawAgent, op: CapturedOp) -> str:
    """One replay of `op` with fresh inputs; returns "ok" or why it stopped."""
    op.spec.raw_inputs(agent.symbols, agent.raw)
    if op.spec.derive is not None:
        op.spec.derive(agent.symbols)
    return agent.raw.run(op.trace, agent.symbols, op.spec.derive)
