"""A slot gives an attempt back (SPEC §23.1): handed off with a reason, or an unstarted claim released.

No lease is left to lapse: an attempt the slot could not run (no sandbox, `run` would not start, `run` died and
left it live) is handed off at once, and a claim the slot cannot start (the runner drains) is released.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.models import Claim
from agent.workspace import state
from agent.workspace.state import HeldAttempt


class SlotLog(Protocol):
    def __call__(self, kind: str, message: str, **fields: Any) -> None: ...


def hand_back(
    client: LeaseholdClient, held: HeldAttempt, *, reason: str, summary: str, log: SlotLog, config_dir: Path
) -> None:
    """Hand the attempt off (reason `reason`), else release it; its state file goes either way once ended."""
    attempts: list[Callable[[], object]] = [
        lambda: client.finish(held.lease, "handoff", interruption_reason_code=reason, result_summary=summary),
        lambda: client.release(held.lease, reason=summary),
    ]
    for call in attempts:
        try:
            call()
        except LeaseholdError as error:
            if error.code == "VALIDATION_ERROR":
                continue  # a server without this reason code: release instead
            log(
                "handoff_failed",
                f"{held.task}: could not hand off ({error.code}: {error})",
                task=held.task,
                code=error.code,
            )
            return
        log(
            "handoff",
            f"{held.task} (attempt {held.attempt_id}) handed off: {summary}",
            task=held.task,
            attempt=held.attempt_id,
            reason=reason,
        )
        state.remove(config_dir, held.agent, held.task, attempt_id=held.attempt_id)
        return


def give_back(client: LeaseholdClient, claim: Claim, *, why: str, log: SlotLog) -> None:
    """Release a claim the slot will not start."""
    with contextlib.suppress(LeaseholdError):
        client.release(claim.lease, reason=f"leasehold runner: {why}")
    log("release", f"released {claim.lease.task} unstarted: {why}", task=claim.lease.task)
