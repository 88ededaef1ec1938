"""`leasehold check report|list` (SPEC §22): report a CI check's result at a commit; list a task's checks.

A CI job runs `leasehold check report --project P --commit SHA --name lint --state success` with the
token of an agent of kind `ci` (`LEASEHOLD_TOKEN`/`LEASEHOLD_URL` or `leasehold login`). The latest
result per (project, commit, name) wins; a `failure` of a required check at a delivered head sends
the task back. Nothing beyond the client is imported.
"""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli.output import EXIT_OK, Output
from agent.workspace.config import load_settings
from agent.workspace.session import make_client, project_from

STATES = ("pending", "success", "failure", "error")


def cmd_check_report(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    body: dict[str, Any] = {
        "project": project_from(args, settings),
        "commit": args.commit,
        "name": args.name,
        "state": args.state,
    }
    if args.url:
        body["url"] = args.url
    if args.summary:
        body["summary"] = args.summary
    with make_client(settings) as client:
        answer = client.request("POST", "/checks/", body=body)
    check = answer.get("check") or {}
    text = f"{check.get('name')} at {str(check.get('commit'))[:12]}: {check.get('state')}"
    if answer.get("sent_back"):
        text += f"\nsent back to ready: {', '.join(answer['sent_back'])}"
    out.result(answer, text)
    return EXIT_OK


def cmd_check_list(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        answer = client.request("GET", f"/tasks/{args.key}/checks/")
    head = answer.get("head")
    lines = [f"{args.key}: checks at {head[:12]}" if head else f"{args.key}: no head yet"]
    required = set(answer.get("required_checks") or [])
    for check in answer.get("results") or []:
        mark = " (required)" if check.get("name") in required else ""
        lines.append(f"  {check.get('name')}{mark}: {check.get('state')} {check.get('url') or ''}".rstrip())
    seen = {check.get("name") for check in answer.get("results") or []}
    lines += [f"  {name} (required): not reported" for name in sorted(required - seen)]
    out.result(answer, "\n".join(lines))
    return EXIT_OK


def add_parsers(command: Any) -> None:
    """The subcommands of this module, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    check = command("check", "Report a CI check's result at a commit, or list the checks at a task's head.", None)
    actions = check.add_subparsers(dest="check_command", metavar="ACTION", required=True)
    report = actions.add_parser("report", help="report a check's result at a commit (latest per name wins)")
    report.set_defaults(handler=cmd_check_report)
    report.add_argument("--project", help="project slug (default: the one set at login)")
    report.add_argument("--commit", required=True, help="the full commit id (40 lowercase hex)")
    report.add_argument("--name", required=True, help="the check's name, a lowercase slug (e.g. lint)")
    report.add_argument("--state", required=True, choices=STATES, help="the check's state")
    report.add_argument("--url", help="where its run is (http or https)")
    report.add_argument("--summary", help="what it found (at most 2,000 characters)")
    listing = actions.add_parser("list", help="the latest checks at a task's head")
    listing.set_defaults(handler=cmd_check_list)
    listing.add_argument("key", help="task key")
    for sub in (report, listing):
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")


__all__ = ["add_parsers", "cmd_check_list", "cmd_check_report"]
