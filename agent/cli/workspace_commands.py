"""Workspaces and the ledger (SPEC §15.1): `prepare_worktree` for `run --worktree`, and `leasehold workspace …`.

`prepare_worktree` opens the attempt's worktree (`agent.workspace.git`), asking
the ledger whether the attempt a taken-over worktree names has ended
(`GET /attempts/{id}/`), writes the worktree's pointer to the attempt, installs
the trailer hook and records the git facts (`branch`, `base_commit` when the
attempt had none, `worktree_path`, `host`). The server is asked between git
calls, never during one.

`leasehold workspace open [KEY | --next] [--dir DIR] [--repo PATH]` claims (or
takes the current attempt) and prepares its worktree for step-by-step work;
`list` shows the repository's worktrees and the attempts in them; `prune`
removes the worktrees whose attempt completed, whose branch is merged into the
default branch or was landed (§21.2: the task is `done` with a `landed_commit`
and the branch holds nothing beyond its delivered head) and which are clean
(§7's `orphan_worktree`), and nothing else. A delivered task's worktree waits
for its lander and is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_NOTHING_CLAIMABLE, EXIT_OK, Output
from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.models import is_past
from agent.workspace import clientfiles, state
from agent.workspace.config import NotLoggedIn, config_dir, load_settings
from agent.workspace.git import (
    REMOTE,
    Opened,
    Repository,
    WorkspaceError,
    default_branch_of,
    find_repository,
    git,
    is_dirty,
    open_workspace,
    start_facts,
    worktrees,
)
from agent.workspace.githooks import install_label_hook
from agent.workspace.session import UsageError, claim_from_args, claim_text, current_attempt, hold_claim, make_client
from agent.workspace.state import HeldAttempt

TERMINAL_STATUSES = {"completed", "failed", "interrupted", "expired", "revoked", "released"}


def attempt_verdict(client: LeaseholdClient) -> Callable[[int], bool | None]:
    """Whether the ledger says attempt N is over: True, False (live), None (unknown or not visible)."""

    def verdict(attempt_id: int) -> bool | None:
        try:
            attempt = client.attempt(attempt_id)
        except LeaseholdError:
            return None
        status = attempt.get("status")
        if status in TERMINAL_STATUSES:
            return True
        # Active but past its expiry: no write of that holder is accepted any more.
        return bool(status == "active" and is_past(attempt.get("lease_expires_at")))

    return verdict


def project_default_branch(client: LeaseholdClient, task: str) -> str | None:
    """The default branch of the task's project (matched by key prefix), if the server says."""
    prefix = task.rsplit("-", 1)[0]
    try:
        projects = client.projects(limit=200)["results"]
    except LeaseholdError:
        return None
    return next((p.get("default_branch") for p in projects if p.get("key_prefix") == prefix), None)


def prepare_worktree(
    client: LeaseholdClient,
    held: HeldAttempt,
    *,
    repo: Repository,
    directory: Path | None,
    context: dict[str, Any],
    record_git: Callable[..., dict[str, Any]],
    out: Output,
) -> Opened:
    """Open `held`'s worktree, point it at the attempt, install the hook, record the facts; save the state."""
    if not held.branch:
        raise WorkspaceError(f"Attempt {held.attempt_id} has no branch: claim with --branch NAME.")
    opened = open_workspace(
        repo,
        task=held.task,
        branch=held.branch,
        base_commit=held.base_commit,
        default_branch=project_default_branch(client, held.task),
        directory=directory,
        own_attempt=held.attempt_id,
        is_terminal=attempt_verdict(client),
        predecessor=context.get("predecessor_work") or None,
    )
    for warning in opened.warnings:
        out.info(f"warning: {warning}")
    if opened.taken_over_from is not None:
        out.info(f"taking over {opened.path} as attempt {opened.taken_over_from} left it")
    state.write_worktree_pointer(opened.path, agent=held.agent, task=held.task, attempt_id=held.attempt_id)
    for copied in clientfiles.carry_into(repo.root, opened.path):
        out.info(f"{copied.relative_to(opened.path)} copied from {repo.root} (the MCP client's configuration)")
    answer = record_git(**start_facts(opened, base_known=held.base_commit is not None))
    label = str((answer.get("attempt") or {}).get("label") or held.label)
    try:
        install_label_hook(opened.path, label)
    except OSError as exc:
        raise WorkspaceError(f"Cannot install the commit hook in {opened.path}: {exc}") from None
    held.label, held.worktree = label, str(opened.path)
    held.base_commit = held.base_commit or opened.base_commit
    state.save(config_dir(), held)
    out.info(f"worktree {opened.path} on {opened.branch} ({opened.branch_source})")
    return opened


def cmd_workspace(args: argparse.Namespace, out: Output) -> int:
    action: Callable[[argparse.Namespace, Output], int] = {
        "open": _open,
        "list": _list,
        "prune": _prune,
    }[args.workspace_command]
    return action(args, out)


def _open(args: argparse.Namespace, out: Output) -> int:
    repo = find_repository(Path(args.repo) if args.repo else None)
    settings = load_settings()
    with make_client(settings) as client:
        context: dict[str, Any]
        if args.key or args.next:
            claim = claim_from_args(client, args, settings)
            if claim is None:
                out.result({"claimed": None}, "Nothing claimable.")
                return EXIT_NOTHING_CLAIMABLE
            held = hold_claim(claim, client, settings)
            out.info(claim_text(claim).replace("\n", "\nleasehold: "))
            context = claim.context
        else:
            found = current_attempt(settings, client)
            if found is None:
                raise UsageError("No current attempt: give a task KEY or --next.")
            held, context = found, client.context(found.task)
        try:
            opened = prepare_worktree(
                client,
                held,
                repo=repo,
                directory=Path(args.dir) if args.dir else None,
                context=context,
                record_git=lambda **facts: dict(client.set_git(held.lease, **facts)),
                out=out,
            )
        except WorkspaceError:
            if args.key or args.next:
                client.release(held.lease, reason="leasehold workspace open: no worktree could be made")
                state.remove(config_dir(), held.agent, held.task, attempt_id=held.attempt_id)
            raise
    result = {
        "task": held.task,
        "attempt": held.attempt_id,
        "branch": opened.branch,
        "worktree": str(opened.path),
        "base_commit": held.base_commit,
        "taken_over_from": opened.taken_over_from,
    }
    out.result(result, str(opened.path))
    return EXIT_OK


def _rows(repo: Repository) -> list[dict[str, Any]]:
    rows = []
    for tree in worktrees(repo):
        pointer = None if tree.main else state.read_worktree_pointer(tree.path)
        rows.append(
            {
                "path": str(tree.path),
                "branch": tree.branch,
                "head": tree.head,
                "main": tree.main,
                "missing": tree.missing,
                "task": pointer.get("task") if pointer else None,
                "agent": pointer.get("agent") if pointer else None,
                "attempt": pointer.get("attempt_id") if pointer else None,
                "dirty": None if tree.missing else is_dirty(tree.path),
            }
        )
    return rows


def _with_status(rows: list[dict[str, Any]], client: LeaseholdClient | None) -> None:
    for row in rows:
        row["attempt_status"] = None
        if client is not None and isinstance(row["attempt"], int):
            with contextlib.suppress(LeaseholdError):  # not visible to this agent: shown as unknown
                row["attempt_status"] = client.attempt(row["attempt"]).get("status")


def _list(args: argparse.Namespace, out: Output) -> int:
    repo = find_repository(Path(args.repo) if args.repo else None)
    rows = _rows(repo)
    try:
        settings = load_settings()
    except NotLoggedIn:  # the git side alone is still worth showing
        _with_status(rows, None)
    else:
        with make_client(settings) as client:
            _with_status(rows, client)
    lines = [
        f"{row['path']}  {row['branch'] or '(detached)'}  "
        + ("main checkout" if row["main"] else f"{row['task'] or '-'} attempt {row['attempt'] or '-'}")
        + (f" {row['attempt_status']}" if row["attempt_status"] else "")
        + (" dirty" if row["dirty"] else "")
        + (" (missing)" if row["missing"] else "")
        for row in rows
    ]
    out.result({"repository": str(repo.root), "worktrees": rows}, "\n".join(lines))
    return EXIT_OK


def _merged(repo: Repository, branch: str, default_branch: str) -> bool:
    """Whether the branch's head is in the default branch (here or on the remote)."""
    for ref in (f"refs/heads/{default_branch}", f"refs/remotes/{REMOTE}/{default_branch}"):
        if git(repo.root, "rev-parse", "--verify", "--quiet", ref, check=False).returncode != 0:
            continue
        if git(repo.root, "merge-base", "--is-ancestor", f"refs/heads/{branch}", ref, check=False).returncode == 0:
            return True
    return False


def _landed(repo: Repository, branch: str, task: dict[str, Any]) -> bool:
    """Whether the task landed (`done` with a `landed_commit`) and the branch holds nothing past its delivered head."""
    landing = task.get("landing") or {}
    delivered = landing.get("delivered_commit")
    if task.get("status") != "done" or not landing.get("landed_commit") or not isinstance(delivered, str):
        return False
    if not re.fullmatch(r"[0-9a-f]{40}", delivered):
        return False
    tip = ["merge-base", "--is-ancestor", f"refs/heads/{branch}", delivered]
    return git(repo.root, *tip, check=False).returncode == 0


def _task_of(client: LeaseholdClient, key: str, seen: dict[str, dict[str, Any] | None]) -> dict[str, Any] | None:
    if key not in seen:
        try:
            seen[key] = client.task(key)
        except LeaseholdError:  # not visible to this agent: nothing is known of its landing
            seen[key] = None
    return seen[key]


def _prune(args: argparse.Namespace, out: Output) -> int:
    repo = find_repository(Path(args.repo) if args.repo else None)
    rows = [row for row in _rows(repo) if not row["main"]]
    settings = load_settings()
    removed, kept = [], []
    tasks: dict[str, dict[str, Any] | None] = {}
    with make_client(settings) as client:
        _with_status(rows, client)
        for row in rows:
            default = default_branch_of(repo, project_default_branch(client, row["task"]) if row["task"] else None)
            task = _task_of(client, row["task"], tasks) if row["task"] and row["branch"] else None
            reason = None
            if row["attempt"] is None:
                reason = "no attempt is recorded there"
            elif row["attempt_status"] != "completed":
                reason = f"its attempt is {row['attempt_status'] or 'unknown'}, not completed"
            elif task is not None and task.get("status") == "delivered":
                reason = "its task is delivered and waits for a lander"
            elif not row["branch"] or not (
                _merged(repo, row["branch"], default) or (task is not None and _landed(repo, row["branch"], task))
            ):
                reason = f"its branch is not merged into {default} nor landed"
            elif row["missing"] or row["dirty"]:
                reason = "it has uncommitted changes" if row["dirty"] else "its directory is missing"
            if reason is not None:
                kept.append({**row, "kept_because": reason})
                continue
            if not args.dry_run:
                git(repo.root, "worktree", "remove", row["path"])  # git itself refuses a dirty one
            removed.append(row)
    verb = "would remove" if args.dry_run else "removed"
    lines = [f"{verb} {row['path']} ({row['branch']})" for row in removed]
    lines += [f"kept {row['path']}: {row['kept_because']}" for row in kept]
    out.result({"removed": removed, "kept": kept, "dry_run": args.dry_run}, "\n".join(lines) or "No worktrees.")
    return EXIT_OK
