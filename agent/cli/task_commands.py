"""The CLI's reach beyond the lease (SPEC §15.4, last bullet): `task show|create|update`, `git`, `block`, `unblock`.

- `task show KEY` prints a task whole; with `--field description|acceptance_criteria
  --offset N --limit N` it reads a range of that text (`GET /tasks/{key}/text/`),
  which is how an agent reads what the bounded context cut.
- `task create TITLE` files a follow-up in the project; `--blocks-current`
  (or `--blocks KEY`) makes the current attempt's task wait for it;
  `--requires gpu,cuda` names the labels a claimer must carry (SPEC §23.1).
- `task update KEY` changes a task's title, priority, class or `--requires`
  (`--requires ""` clears them), on the version it reads first.
- `git` records git facts of the current attempt (branch, base_commit,
  head_commit, commits_ahead, dirty, pushed, worktree_path, host), given as
  options or read from the checkout with `--detect`.
- `block [KEY] --by OTHER` / `unblock [KEY] --by OTHER` add or remove a
  dependency; KEY defaults to the current attempt's task.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.commands import _holder
from agent.cli.output import EXIT_OK, Output
from agent.client.models import GIT_FACTS
from agent.workspace import gitfacts
from agent.workspace.config import load_settings
from agent.workspace.session import UsageError, block_on, current_attempt, make_client, project_from

TEXT_FIELDS = ("description", "acceptance_criteria")


def _current_task(settings: Any, client: Any, key: str | None) -> str:
    if key:
        return key
    held = current_attempt(settings, client)
    if held is None:
        raise UsageError("Give a task KEY (no current attempt).")
    return held.task


def cmd_task_show(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        key = _current_task(settings, client, args.key)
        if args.field or args.offset or args.limit:
            part = client.task_text(key, field=args.field or "description", offset=args.offset, limit=args.limit)
            out.result(part, part["text"])
            if part["more"]:
                following = part["offset"] + len(part["text"])  # `length` is the whole field's
                out.info(f"more follows: leasehold task show {key} --field {part['field']} --offset {following}")
            return EXIT_OK
        task = client.task(key)
    out.result(task, task_text(task))
    return EXIT_OK


def _blocker_text(blocker: Any) -> str:
    """`KEY (effective status)`: all the server shows of a blocker, whichever project it is in (SPEC §22)."""
    if not isinstance(blocker, dict):
        return str(blocker)
    status = blocker.get("effective_status") or blocker.get("status")
    return f"{blocker.get('key')} ({status})" if status else str(blocker.get("key"))


def task_text(task: dict[str, Any]) -> str:
    """A whole task for a human: the header line, its facts, blockers, then the long texts."""
    status = task.get("effective_status") or task.get("status")
    lines = [f"{task.get('key')}: {task.get('title')} [{status}]"]
    facts = {
        "priority": task.get("priority"),
        "class": task.get("task_class") or None,
        "labels": ", ".join(task.get("labels") or []) or None,
        "requires": ", ".join(task.get("requires") or []) or None,
        "holder": task.get("holder"),
        "lease until": task.get("lease_expires_at"),
        "version": task.get("version"),
        "epoch": task.get("epoch"),
    }
    lines.append("  ".join(f"{name}: {value}" for name, value in facts.items() if value not in (None, "")))
    blockers = task.get("blocked_by") or []
    if blockers:
        lines.append("Blocked by: " + ", ".join(_blocker_text(blocker) for blocker in blockers))
    for name in TEXT_FIELDS:
        if task.get(name):
            lines += ["", f"{name.replace('_', ' ').capitalize()}:", str(task[name])]
    return "\n".join(lines)


def cmd_task_create(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        blocks = args.blocks
        if args.blocks_current:
            blocks = _current_task(settings, client, None)
        fields = {
            "description": args.description,
            "acceptance_criteria": args.acceptance_criteria,
            "status": args.status,
            "priority": args.priority,
            "task_class": args.task_class,
            "labels": args.label or None,
            "requires": requires_list(args.requires),
            "blocked_by": args.blocked_by or None,
        }
        created = client.create_task(project_from(args, settings), args.title, **fields)
        answer: dict[str, Any] = {"task": created}
        if blocks:
            answer["dependency"] = block_on(client, blocks, created["key"])
    text = f"Created {created['key']} {created['title']!r} [{created['status']}]."
    if blocks:
        text += f" {blocks} now waits for it."
    out.result(answer, text)
    return EXIT_OK


def requires_list(text: str | None) -> list[str] | None:
    """`--requires gpu,cuda` as a list (None when not given; `""` is the empty list); the server checks the labels."""
    if text is None:
        return None
    return [label.strip() for label in text.split(",") if label.strip()]


def cmd_task_update(args: argparse.Namespace, out: Output) -> int:
    changes: dict[str, Any] = {
        "title": args.title,
        "priority": args.priority,
        "task_class": args.task_class,
        "requires": requires_list(args.requires),
    }
    changes = {name: value for name, value in changes.items() if value is not None}
    if not changes:
        raise UsageError("Name something to change (--title, --priority, --task-class, --requires).")
    settings = load_settings()
    with make_client(settings) as client:
        version = client.task(args.key)["version"]
        updated = client.update_task(args.key, version=version, changes=changes)
    changed = ", ".join(updated.get("changed") or []) or "nothing"
    out.result(updated, f"{args.key}: changed {changed} (now version {updated.get('version')}).")
    return EXIT_OK


def git_facts_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The facts the options name (None for the ones they leave out)."""
    return {name: getattr(args, name, None) for name in GIT_FACTS}


def cmd_git(args: argparse.Namespace, out: Output) -> int:
    facts = {name: value for name, value in git_facts_from_args(args).items() if value is not None}
    if args.detect:
        settings = load_settings()
        with make_client(settings) as client:
            held = current_attempt(settings, client)
            # The server knows the base best (inherited, or recorded since the claim).
            known = client.attempt(held.attempt_id).get("base_commit") if held is not None else None
        where = Path(args.repo or (held.worktree if held and held.worktree else ".")).absolute()
        found = gitfacts.detect(where, base_commit=facts.get("base_commit") or known)  # not git: exit 8
        facts = {**found, **facts}  # what the options say wins over what was read
    if not facts:
        raise UsageError("Name a git fact to record (e.g. --head-commit SHA), or --detect to read them from git.")
    recorded = _holder(lambda client, lease: client.set_git(lease, **facts))
    attempt = recorded.get("attempt", {}) if isinstance(recorded, dict) else {}
    shown = ", ".join(f"{name}={value}" for name, value in facts.items())
    out.result(recorded, f"{attempt.get('task', '')} attempt {attempt.get('id', '')}: recorded {shown}.".strip())
    return EXIT_OK


def cmd_dependency(args: argparse.Namespace, out: Output) -> int:
    settings = load_settings()
    with make_client(settings) as client:
        key = _current_task(settings, client, args.key)
        if args.command == "block":
            answer = client.add_dependency(key, blocked_by=args.by)
            text = f"{key} is blocked by {args.by}."
        else:
            answer = client.remove_dependency(key, blocked_by=args.by)
            text = f"{key} is no longer blocked by {args.by}."
    out.result(answer, text)
    return EXIT_OK


def add_parsers(command: Any) -> None:
    """The subcommands of this module, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    task = command("task", "Read a task (whole, or a range of its text), file a follow-up task, or change one.", None)
    actions = task.add_subparsers(dest="task_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="show a task, or a range of its description / acceptance criteria")
    show.set_defaults(handler=cmd_task_show)
    show.add_argument("key", nargs="?", help="task key (default: the current attempt's task)")
    show.add_argument("--field", choices=TEXT_FIELDS, help="read this text in a range instead of the whole task")
    show.add_argument("--offset", type=int, default=0, help="first character of the range (default 0)")
    show.add_argument("--limit", type=int, help="characters to read (at most 16,000)")
    create = actions.add_parser("create", help="create a task (a follow-up) in the project")
    create.set_defaults(handler=cmd_task_create)
    create.add_argument("title", help="the new task's title")
    create.add_argument("--project", help="project slug (default: the one set at login)")
    create.add_argument("--description", help="what the task is about")
    create.add_argument("--acceptance-criteria", help="when it is done")
    create.add_argument("--status", choices=("open", "ready"), help="initial status (server default: open)")
    create.add_argument("--priority", type=int, help="higher is claimed first")
    create.add_argument("--task-class", help="the task's class")
    create.add_argument("--label", action="append", default=[], help="a label; repeatable")
    create.add_argument("--requires", metavar="LABELS", help="labels a claimer must carry, e.g. gpu,cuda")
    create.add_argument("--blocked-by", action="append", default=[], help="a task the new one waits for; repeatable")
    create.add_argument("--blocks", metavar="KEY", help="make task KEY wait for the new task")
    create.add_argument("--blocks-current", action="store_true", help="make the current attempt's task wait for it")
    update = actions.add_parser("update", help="change a task's title, priority, class or required labels")
    update.set_defaults(handler=cmd_task_update)
    update.add_argument("key", help="the task's key")
    update.add_argument("--title", help="the new title")
    update.add_argument("--priority", type=int, help="higher is claimed first")
    update.add_argument("--task-class", help="the task's class")
    update.add_argument("--requires", metavar="LABELS", help='labels a claimer must carry, e.g. gpu,cuda ("" clears)')
    for sub in (show, create, update):
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")

    git = command("git", "Record git facts of the current attempt (options, or --detect to read them).", cmd_git)
    git.add_argument("--detect", action="store_true", help="read the facts from git in the attempt's checkout")
    git.add_argument("--repo", help="with --detect: the checkout to read (default: the attempt's worktree, else .)")
    git.add_argument("--branch", help="the attempt's branch")
    git.add_argument("--base-commit", help="40-hex commit the work started from")
    git.add_argument("--head-commit", help="40-hex commit the branch is at")
    git.add_argument("--commits-ahead", type=int, help="commits on the branch beyond the base")
    git.add_argument("--dirty", action=argparse.BooleanOptionalAction, help="uncommitted changes in the worktree")
    git.add_argument("--pushed", action=argparse.BooleanOptionalAction, help="the remote has the head")
    git.add_argument("--worktree-path", help="absolute path of the worktree")
    git.add_argument("--host", help="the machine the worktree is on")

    for name, text in (("block", "Make a task wait for another."), ("unblock", "Remove a task's dependency.")):
        sub = command(name, text, cmd_dependency)
        sub.add_argument("key", nargs="?", help="the waiting task (default: the current attempt's task)")
        sub.add_argument("--by", required=True, metavar="KEY", help="the task it waits for")


__all__ = [
    "add_parsers",
    "cmd_dependency",
    "cmd_git",
    "cmd_task_create",
    "cmd_task_show",
    "cmd_task_update",
    "requires_list",
    "task_text",
]
