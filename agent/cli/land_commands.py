"""`leasehold land` (a lander next to a clone) and `leasehold landing` (the queue), SPEC §21.

`agent.land` is imported inside the commands only: the other commands do not
pay for it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_OK, EXIT_WORKSPACE, Output
from agent.workspace.config import load_settings
from agent.workspace.session import UsageError, project_from


def _client(settings: Any) -> Any:
    from agent.land.api import LandingClient

    return LandingClient(settings.url, settings.token, trace_path=os.environ.get("LEASEHOLD_TRACE") or None)


def _clone(args: argparse.Namespace) -> Path:
    from agent.land.git import Git, git_environment

    path = Path(args.repo or ".").expanduser().absolute()
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory (give the lander's clone with --repo PATH).")
    top = Git(path, git_environment(path)).out("rev-parse", "--show-toplevel")
    if not top:
        raise UsageError(f"{path} is not in a git repository (give the lander's clone with --repo PATH).")
    return Path(top)


def cmd_land(args: argparse.Namespace, out: Output) -> int:
    from agent.land import lander
    from agent.land.git import LandGitError

    settings = load_settings()
    project = project_from(args, settings)
    clone = _clone(args)
    client = _client(settings)
    stopping = lander.Stopping()

    def emit(report: lander.Report) -> None:
        out.result(report.data, report.text)

    try:
        with stopping.installed():
            if args.watch:
                out.info(f"landing {project}'s queue from {clone}; waiting for work (SIGTERM to stop)")
                return lander.watch(
                    client,
                    project,
                    clone,
                    stopping=stopping,
                    emit=emit,
                    log=out.info,
                    lease_seconds=args.lease_seconds,
                    parallel_checks=args.parallel_checks,
                )
            report = lander.land_once(
                client,
                project,
                clone,
                lease_seconds=args.lease_seconds,
                stopping=stopping,
                log=out.info,
                parallel_checks=args.parallel_checks,
            )
            emit(report)
            return report.exit_code
    except LandGitError as error:
        out.error("LANDING_GIT", str(error))
        return EXIT_WORKSPACE
    finally:
        client.close()


def cmd_landing(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    project = project_from(args, settings)
    client = _client(settings)
    try:
        page = client.project_landing(project)
    finally:
        client.close()
    out.result(page, landing_text(project, page))
    return EXIT_OK


def landing_text(project: str, page: dict[str, Any]) -> str:
    """The landing page for a human: settings, the live landing, the queue in order, the latest results."""
    settings = page.get("settings") or {}
    target = settings.get("target_branch") or "(landing off)"
    lines = [f"{project}: landing onto {target} by {settings.get('land_method', '?')}"]
    if settings.get("check_command"):
        lines.append(f"  check: {settings['check_command']} (timeout {settings.get('check_timeout_seconds')} s)")
    live = page.get("live")
    if live:
        tasks = ", ".join(
            str(task.get("key", task)) if isinstance(task, dict) else str(task) for task in live.get("tasks", [])
        )
        lines.append(
            f"live: landing {live.get('id')} by {live.get('agent', '?')} ({tasks}) until {live.get('lease_expires_at')}"
        )
    queue = page.get("queue") or []
    lines.append(f"queue ({len(queue)}):" if queue else "queue: empty")
    for position, item in enumerate(queue, start=1):
        head = str(item.get("head_commit") or "")[:12]
        lines.append(f"  {position}. {item.get('key')} {item.get('title')} [{item.get('branch')} {head}]")
    recent = page.get("recent") or []
    if recent:
        lines.append("recent:")
        for landing in recent:
            keys = ", ".join(
                str(task.get("key", task)) if isinstance(task, dict) else str(task) for task in landing.get("tasks", [])
            )
            lines.append(f"  landing {landing.get('id')}: {landing.get('result') or landing.get('status')} {keys}")
    return "\n".join(lines)


def _parallel_checks(text: str) -> int:
    from agent.land.engine import MAX_PARALLEL_CHECKS

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_PARALLEL_CHECKS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_PARALLEL_CHECKS}, not {text!r}")
    return value


def add_parsers(command: Any) -> None:
    """The subcommands of this module, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    land = command(
        "land",
        "Land the project's delivered tasks onto its target branch (claim a landing, merge in a scratch worktree, "
        "check, push with a compare-and-swap, finish). Exit 0 landed, 3 nothing to land, 5 lease lost, 7 failed.",
        cmd_land,
    )
    land.add_argument("--next", action="store_true", help="land the next queued landing (the default)")
    land.add_argument(
        "--watch", action="store_true", help="keep landing as work is delivered, until SIGTERM (never exits on empty)"
    )
    land.add_argument("--repo", help="the lander's clone (default: the repository containing the current directory)")
    land.add_argument("--project", help="project slug (default: the one set at login)")
    land.add_argument(
        "--lease-seconds",
        type=int,
        help="the landing's lease (default: the project's; the server clamps it); renewed every third of it",
    )
    land.add_argument(
        "--parallel-checks",
        type=_parallel_checks,
        default=1,
        metavar="N",
        help="bisection: check up to N candidates at once, the next probes of both outcomes (default 1: one "
        "check at a time; only where this machine and the project's check can run N at once)",
    )
    landing = command(
        "landing", "Show the project's landing queue, the live landing and the latest results.", cmd_landing
    )
    landing.add_argument("--project", help="project slug (default: the one set at login)")
