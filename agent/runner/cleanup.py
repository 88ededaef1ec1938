"""What a starting runner removes (SPEC §23.1): it holds nothing yet, so no state file of its slots may say it
does, and no worktree pointer may name one of its slot agents.

Registration has already handed off, server-side, every attempt its slot agents held (`runner_restart`). What is
left on disk from the runner before (killed, crashed, or stopped while a child was ending) is removed here and
logged: each slot's state files (`<slot dir>/leasehold/attempts/*/*.json`) and remembered identities, and in each
project's clone the `leasehold-attempt.json` pointers that name a slot agent of this runner. Worktrees, branches
and commits stay: they are the predecessors' work, which the successor takes over (§15.1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from agent.runner.log import EventLog
from agent.workspace import state
from agent.workspace.git import WorkspaceError, find_repository, worktrees


def remove_state_files(config_dir: Path, log: EventLog, *, slot: int) -> list[Path]:
    """Every attempt state file under a slot's config directory, and its identity cache."""
    removed = []
    for path in sorted((config_dir / "attempts").glob("*/*.json")):
        held = state.load(config_dir, path.parent.name, path.stem) if path.stem else None
        what = held.describe() if held is not None else path.name
        path.unlink(missing_ok=True)
        removed.append(path)
        log.event("cleanup", f"removed the state file of {what}: this runner no longer holds it", slot=slot, path=path)
    with contextlib.suppress(OSError):
        (config_dir / state.IDENTITIES_NAME).unlink(missing_ok=True)
    return removed


def remove_pointers(repositories: Iterable[Path], agents: set[str], log: EventLog) -> list[Path]:
    """The worktree pointers in these clones that name one of `agents` (the worktrees themselves stay)."""
    removed = []
    for repository in repositories:
        try:
            trees = worktrees(find_repository(repository))
        except WorkspaceError as error:
            log.event("cleanup", f"cannot list the worktrees of {repository}: {error}")
            continue
        for tree in trees:
            if tree.main or tree.missing:
                continue
            pointer = state.read_worktree_pointer(tree.path)
            git_dir = state.git_dir_of(tree.path)
            if pointer is None or git_dir is None or pointer.get("agent") not in agents:
                continue
            path = git_dir / state.POINTER_NAME
            path.unlink(missing_ok=True)
            removed.append(path)
            log.event(
                "cleanup",
                f"removed the pointer of {tree.path} to {pointer.get('task')} (attempt {pointer.get('attempt_id')}, "
                f"{pointer.get('agent')}); the worktree stays for the successor",
                path=path,
            )
    return removed
