"""What the CLI's commands and its two launchers (`run`, `mcp`) share.

The client made from the settings, the claim made from a command's
arguments and its text, and the state file's rule: one current attempt at a
time (`refuse_to_replace`). Kept apart from `agent.cli` so that the CLI can
import the launchers and the launchers need nothing of the CLI.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from agent.client import Claim, LeaseholdClient
from agent.config import Settings, load_state
from agent.labels import git_trailer
from agent.models import is_past


class UsageError(Exception):
    """The command cannot run as asked (exit 2)."""


def make_client(settings: Settings) -> LeaseholdClient:
    """The client for the configured server; `LEASEHOLD_TRACE=<file>` logs each request (no tokens)."""
    return LeaseholdClient(settings.url, settings.token, trace_path=os.environ.get("LEASEHOLD_TRACE") or None)


def project_from(args: argparse.Namespace, settings: Settings) -> str:
    """The project the command names, else the default set at login."""
    project = getattr(args, "project", None) or settings.project
    if not project:
        raise UsageError("Name the project: --project SLUG (or `leasehold login --project SLUG` to set a default).")
    return str(project)


def refuse_to_replace(args: argparse.Namespace) -> None:
    """One current attempt at a time: a live one in the state file is kept unless `--replace` says otherwise."""
    current = load_state()
    if current is None or current.lost or getattr(args, "replace", False) or is_past(current.lease.lease_expires_at):
        return
    raise UsageError(
        f"You hold {current.lease.task} (attempt {current.lease.attempt_id}): finish or release it first, "
        "or pass --replace to forget it."
    )


def claim_from_args(client: LeaseholdClient, args: argparse.Namespace, settings: Settings) -> Claim | None:
    """Claim the task KEY, or the project's next one with `--next`; None when nothing is claimable."""
    options: dict[str, Any] = {
        "lease_seconds": args.lease_seconds,
        "branch": args.branch,
        "base_commit": args.base_commit,
        "environment": args.environment,
        "environment_kind": args.environment_kind,
    }
    if args.next:
        if args.key:
            raise UsageError("Give a task KEY or --next, not both.")
        return client.claim_next(project_from(args, settings), task_class=args.task_class, **options)
    if not args.key:
        raise UsageError("Give a task KEY, or --next (with --project).")
    return client.claim(args.key, **options)


def claim_text(claim: Claim) -> str:
    """The claim for a human: task, attempt, epoch, lease, branch and the git trailer line."""
    title = claim.task.get("title", "")
    lines = [
        f"Claimed {claim.lease.task} {title!r}: attempt {claim.lease.attempt_id}, epoch {claim.lease.epoch}.",
        f"Lease until {claim.lease.lease_expires_at}; renew every {claim.lease.renew_every_seconds} s.",
    ]
    if claim.attempt.get("branch"):
        lines.append(f"Branch: {claim.attempt['branch']}")
    if claim.label:
        lines.append(git_trailer(claim.label))
    return "\n".join(lines)
