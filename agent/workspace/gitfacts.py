"""The git facts of any checkout (SPEC §15.4): what `leasehold git --detect` and the MCP `git` tool record.

The checkout's top level (`worktree_path`), its branch, the host, and what
`agent.workspace.git.head_facts` reads at a run's end (head, commits ahead of
the base, dirty, pushed). Nothing is changed. A directory that is not in a
git checkout has no facts (`WorkspaceError`, one line).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from agent.workspace.git import WorkspaceError, git, head_facts

__all__ = ["WorkspaceError", "detect"]


def _out(directory: Path, *args: str) -> str | None:
    done = git(directory, *args, check=False)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def detect(directory: Path, *, base_commit: str | None = None) -> dict[str, Any]:
    """branch, worktree_path, host, head_commit, dirty, pushed and (given a base) commits_ahead of `directory`."""
    if not directory.is_dir():
        raise WorkspaceError(f"{directory} is not a directory.")
    top = _out(directory, "rev-parse", "--show-toplevel")
    if top is None:
        raise WorkspaceError(f"{directory.resolve()} is not in a git checkout.")
    worktree = Path(top).resolve()
    branch = _out(worktree, "symbolic-ref", "--quiet", "--short", "HEAD")
    facts: dict[str, Any] = {"worktree_path": str(worktree), "host": socket.gethostname()[:200]}
    if branch:
        facts["branch"] = branch
    return {**facts, **head_facts(worktree, branch=branch, base_commit=base_commit)}
