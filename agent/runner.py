"""`leasehold run -- COMMAND…`: run a command under a lease (SPEC §13).

1. Get a lease: claim KEY or `--next`, or reuse the current attempt of the
   state file (one made by `leasehold claim`).
2. Start the lease keeper (renewals every `renew_every_seconds`) and the run
   heartbeat, then start COMMAND in its own process group, with
   `LEASEHOLD_STATE`, `LEASEHOLD_TASK`, `LEASEHOLD_ATTEMPT_ID`,
   `LEASEHOLD_EPOCH` and `LEASEHOLD_SUMMARY_FILE` in its environment (never
   the token: `leasehold note` inside COMMAND reads it from the state file).
3. COMMAND exits 0: finish `done` (or `--on-success review`), exit 0.
   COMMAND exits non-zero or dies of a signal: finish `failed` with
   `--failure-reason` (default `implementation_error`: the run cannot tell a
   test failure from any other, so it claims no more than "the work failed";
   pass `--failure-reason tests_failed` when COMMAND is a test run), exit 7.
   The result summary is what COMMAND wrote to `$LEASEHOLD_SUMMARY_FILE`, else
   "`COMMAND` exited N".
4. The lease is lost (the keeper says so): SIGTERM to COMMAND's process
   group at once, SIGKILL after `--grace-seconds`; nothing more is sent with
   the token, the state file marks the lease lost, exit 5.
5. `leasehold run` itself gets SIGINT/SIGTERM/SIGHUP: the signal goes on to
   COMMAND; once COMMAND exits the attempt is handed off
   (`user_request` for SIGINT, else `client_shutdown`), exit 128+signal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from agent import state
from agent.client import LeaseholdClient, Outcome
from agent.config import config_dir, load_settings
from agent.errors import LeaseholdError
from agent.keeper import Heartbeat, LeaseKeeper
from agent.output import (
    EXIT_COMMAND_FAILED,
    EXIT_LEASE_LOST,
    EXIT_NOTHING_CLAIMABLE,
    EXIT_OK,
    Output,
)
from agent.session import (
    UsageError,
    claim_from_args,
    claim_text,
    current_attempt,
    hold_claim,
    make_client,
    refuse_to_replace,
)
from agent.state import HeldAttempt

POLL_SECONDS = 0.05
SUMMARY_MAX_CHARS = 4000
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _lease_for_run(client: LeaseholdClient, args: argparse.Namespace, out: Output) -> HeldAttempt | None:
    settings = load_settings()
    if args.key or args.next:
        refuse_to_replace(args, client, settings)
        claim = claim_from_args(client, args, settings)
        if claim is None:
            return None
        held = hold_claim(claim, client, settings, owner="run")
        out.info(claim_text(claim).replace("\n", "\nleasehold: "))
        return held
    current = current_attempt(settings, client)
    if current is None:
        raise UsageError("No current attempt: give a task KEY or --next (or `leasehold claim` first).")
    if current.lost:
        raise LeaseholdError(f"The lease on {current.task} was lost ({current.lost_reason}).", code="LEASE_LOST")
    out.info(f"reusing attempt {current.attempt_id} on {current.task}")
    current.owner, current.pid = "run", os.getpid()
    state.save(config_dir(), current)
    return current


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def stop_child(child: subprocess.Popen[bytes], *, grace_seconds: float, term_sent: bool = False) -> int:
    """SIGTERM to the child's process group (unless sent), SIGKILL after the grace period; its exit status."""
    if not term_sent:
        _signal_group(child, signal.SIGTERM)
    try:
        return child.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        return child.wait()


def _summary(command: list[str], returncode: int, summary_file: Path) -> str:
    try:
        written = summary_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        written = ""
    if written:
        return written[:SUMMARY_MAX_CHARS]
    how = f"exited {returncode}" if returncode >= 0 else f"was killed by signal {-returncode}"
    return f"`{shlex.join(command)}` {how}."


def run(args: argparse.Namespace, out: Output) -> int:
    command: list[str] = args.run_command
    if not command:
        raise UsageError("Give the command after `--`: leasehold run [KEY | --next] -- COMMAND [ARG ...]")
    settings = load_settings()
    client = make_client(settings)
    try:
        held = _lease_for_run(client, args, out)
        if held is None:
            out.result({"claimed": None}, "Nothing claimable.")
            return EXIT_NOTHING_CLAIMABLE
        return _supervise(client, held, command, args, out)
    finally:
        client.close()


def _supervise(
    client: LeaseholdClient, held: HeldAttempt, command: list[str], args: argparse.Namespace, out: Output
) -> int:
    lease = held.lease
    keeper = LeaseKeeper(client.clone(), lease)
    heartbeat = Heartbeat(client.clone(), every_seconds=args.heartbeat_seconds)
    received: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if child is not None:
            _signal_group(child, signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    with tempfile.TemporaryDirectory(prefix="leasehold-run-") as scratch:
        summary_file = Path(scratch) / "summary.txt"
        env = {
            **os.environ,
            "LEASEHOLD_RUN": "1",
            "LEASEHOLD_TASK": lease.task,
            "LEASEHOLD_ATTEMPT_ID": str(lease.attempt_id),
            "LEASEHOLD_EPOCH": str(lease.epoch),
            "LEASEHOLD_SUMMARY_FILE": str(summary_file),
        }
        try:
            keeper.start()
            heartbeat.start()
            out.info(f"running {shlex.join(command)} (renewing every {lease.renew_every_seconds} s)")
            try:
                child = subprocess.Popen(command, env=env, start_new_session=True)
            except OSError as exc:
                # Nothing was done: give the task back rather than sit on it until the lease lapses.
                with contextlib.suppress(LeaseholdError):
                    keeper.release(reason=f"leasehold run: cannot start {command[0]!r}")
                    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
                raise UsageError(f"Cannot start {command[0]!r}: {exc}") from None
            while child.poll() is None:
                if keeper.lost.wait(POLL_SECONDS):
                    break
            if keeper.lost.is_set():
                return _lease_lost(child, keeper, held, args, out)
            returncode = child.returncode
            return _finish(keeper, held, command, returncode, received, summary_file, args, out)
        finally:
            keeper.stop()
            heartbeat.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _lease_lost(
    child: subprocess.Popen[bytes], keeper: LeaseKeeper, held: HeldAttempt, args: argparse.Namespace, out: Output
) -> int:
    lost_at = time.monotonic()
    still_running = child.poll() is None
    if still_running:
        _signal_group(child, signal.SIGTERM)  # first: the command must stop working on the task at once
    state.mark_lost(config_dir(), held, keeper.lost_reason or "lost")
    status = stop_child(child, grace_seconds=args.grace_seconds, term_sent=True) if still_running else child.returncode
    out.info(f"lease lost ({keeper.lost_reason}); command stopped (status {status})")
    out.result(
        {
            "task": keeper.lease.task,
            "attempt": keeper.lease.attempt_id,
            "outcome": None,
            "lease_lost": True,
            "reason": keeper.lost_reason,
            "command_status": status,
            "stopped_in_seconds": round(time.monotonic() - lost_at, 3),
        },
        "",
    )
    return EXIT_LEASE_LOST


def _finish(
    keeper: LeaseKeeper,
    held: HeldAttempt,
    command: list[str],
    returncode: int,
    received: list[int],
    summary_file: Path,
    args: argparse.Namespace,
    out: Output,
) -> int:
    summary = _summary(command, returncode, summary_file)
    fields: dict[str, Any] = {"result_summary": summary}
    outcome: Outcome
    if received:
        outcome = "handoff"
        fields["interruption_reason_code"] = "user_request" if received[0] == signal.SIGINT else "client_shutdown"
        exit_code = 128 + received[0]
    elif returncode == 0:
        outcome = args.on_success
        exit_code = EXIT_OK
    else:
        outcome = "failed"
        fields["failure_reason_code"] = args.failure_reason
        exit_code = EXIT_COMMAND_FAILED
    try:
        finished = keeper.finish(outcome, **fields)
    except LeaseholdError as error:
        if keeper.lost.is_set() or error.code == "LEASE_LOST":
            state.mark_lost(config_dir(), held, keeper.lost_reason or str(error))
        return out.failure(error)
    state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
    attempt, task = finished["attempt"], finished["task"]
    out.info(f"{attempt['task']}: attempt {attempt['id']} {attempt['status']} ({outcome}); task {task['status']}")
    out.result(
        {
            "task": attempt["task"],
            "attempt": attempt["id"],
            "outcome": outcome,
            "attempt_status": attempt["status"],
            "task_status": task["status"],
            "command_status": returncode,
            "lease_lost": False,
        },
        "",
    )
    return exit_code
