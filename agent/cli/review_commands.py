"""The reviewer's commands and the discussion (SPEC §16): `review next|approve|request-changes|block`,
`decide`, `comment`.

- `review next` claims the project's oldest open review that is not your own work (a review
  attempt, held like `claim`'s: `note`, `renew`, `release` act on it).
- `review approve|request-changes|block` finishes the current review attempt with that decision
  (`--summary`, and `--finding` repeatable: at most 20 of at most 500 characters). Approving a
  target that moved since the request is STALE_REVIEW_TARGET.
- `decide TITLE [--body] [--task KEY]` records a decision of the project; `comment [KEY] BODY`
  comments on a task (default: the current attempt's).
"""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli.commands import _holder, _inside_run
from agent.cli.output import EXIT_NOTHING_CLAIMABLE, EXIT_OK, Output
from agent.client.models import Outcome
from agent.workspace.config import load_settings
from agent.workspace.session import (
    UsageError,
    claim_text,
    current_attempt,
    hold_claim,
    make_client,
    project_from,
    refuse_to_replace,
)

DECISIONS: dict[str, Outcome] = {"approve": "approved", "request-changes": "changes_requested", "block": "blocked"}


def cmd_review_next(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        refuse_to_replace(args, client, settings)
        claim = client.review_next(project_from(args, settings), lease_seconds=args.lease_seconds)
        if claim is None:
            out.result({"claimed": None}, "No review is open.")
            return EXIT_NOTHING_CLAIMABLE
        hold_claim(claim, client, settings)
    review = claim.context.get("review") or {}
    text = claim_text(claim) + (
        f"\nReviewing the work of attempt {review.get('work_attempt')} by {review.get('worker')}: "
        f"head {review.get('head_commit')}, task version {review.get('task_version')}."
    )
    out.result({**claim.summary(), "context": claim.context}, text)
    return EXIT_OK


def cmd_review_decide(args: argparse.Namespace, out: Output) -> int:
    _inside_run("decides")
    outcome = DECISIONS[args.review_command]
    if outcome == "blocked" and not args.summary:
        raise UsageError("Blocking needs --summary: it becomes the task's blocked reason.")
    finished = _holder(
        lambda client, lease: client.finish(
            lease,
            outcome,
            result_summary=args.summary,
            findings=args.finding or None,
        ),
        ends=True,
    )
    attempt, task = finished["attempt"], finished["task"]
    out.result(finished, f"{attempt['task']}: review {outcome}; task {task['status']}.")
    return EXIT_OK


def cmd_decide(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        decision = client.decide(project_from(args, settings), args.title, body=args.body or "", task=args.task)
    out.result(decision, f"Decision {decision['id']} recorded: {decision['title']}")
    return EXIT_OK


def cmd_comment(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        key = args.key
        if not key:
            held = current_attempt(settings, client)
            if held is None:
                raise UsageError("Give a task KEY (no current attempt).")
            key = held.task
        comment = client.comment(key, args.body)
    out.result(comment, f"Commented on {key}.")
    return EXIT_OK


def add_parsers(command: Any) -> None:
    review = command("review", "Review others' work: claim the next open review, then decide it.", None)
    actions = review.add_subparsers(dest="review_command", metavar="ACTION", required=True)
    nxt = actions.add_parser("next", help="claim the project's oldest open review (not your own work)")
    nxt.set_defaults(handler=cmd_review_next)
    nxt.add_argument("--project", help="project slug (default: the one set at login)")
    nxt.add_argument("--lease-seconds", type=int, help="requested lease length (the server clamps it)")
    nxt.add_argument("--replace", action="store_true", help="forget a current attempt instead of refusing")
    subs = [nxt]
    for name, text in (
        ("approve", "approve the work: the task becomes done"),
        ("request-changes", "send the work back with findings: the task becomes ready"),
        ("block", "block the work: the task becomes blocked with --summary as the reason"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.set_defaults(handler=cmd_review_decide)
        sub.add_argument("--summary", help="what you found (at most 8,000 characters)")
        sub.add_argument("--finding", action="append", default=[], help="a finding (<= 500 chars); repeatable")
        subs.append(sub)
    for sub in subs:
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")

    decide = command("decide", "Record a decision of the project (title <= 200, body <= 4,000 characters).", cmd_decide)
    decide.add_argument("title", help="the decision")
    decide.add_argument("--body", help="why, and what it means")
    decide.add_argument("--task", metavar="KEY", help="the task it is about (default: the whole project)")
    decide.add_argument("--project", help="project slug (default: the one set at login)")

    comment = command("comment", "Comment on a task (<= 8,000 characters); its holder sees it.", cmd_comment)
    comment.add_argument("key", nargs="?", help="task key (default: the current attempt's task)")
    comment.add_argument("body", help="the comment")


__all__ = ["add_parsers", "cmd_comment", "cmd_decide", "cmd_review_decide", "cmd_review_next"]
