"""The git facts of a checkout, read with `git` itself (SPEC §15.4): what `leasehold git --detect` and the MCP
`git` tool record.

Only local knowledge: nothing is fetched, nothing is changed. `pushed` says
whether the remote-tracking branch (`origin/<branch>`, as last fetched or
pushed) contains the head. A directory that is not a git checkout has no facts
(`NotAGitCheckout`).
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

GIT_TIMEOUT_SECONDS = 20


class NotAGitCheckout(Exception):
    """The directory is not inside a git checkout (or git is missing)."""


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotAGitCheckout(f"git cannot run in {directory}: {exc}") from None


def _out(directory: Path, *args: str) -> str | None:
    done = _git(directory, *args)
    return done.stdout.strip() if done.returncode == 0 else None


def detect(directory: Path, *, base_commit: str | None = None, remote: str = "origin") -> dict[str, Any]:
    """branch, head_commit, dirty, worktree_path, host, pushed and (given a base) commits_ahead of `directory`."""
    top = _out(directory, "rev-parse", "--show-toplevel")
    if top is None:
        raise NotAGitCheckout(f"{directory} is not inside a git checkout.")
    facts: dict[str, Any] = {"worktree_path": str(Path(top).resolve()), "host": socket.gethostname()[:200]}
    head = _out(directory, "rev-parse", "--verify", "--quiet", "HEAD")
    branch = _out(directory, "symbolic-ref", "--quiet", "--short", "HEAD")
    status = _git(directory, "status", "--porcelain")
    if status.returncode == 0:
        facts["dirty"] = bool(status.stdout.strip())
    if head:
        facts["head_commit"] = head
    if branch:
        facts["branch"] = branch
    if head and branch:
        tracked = _out(directory, "rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{branch}")
        facts["pushed"] = bool(tracked) and (
            tracked == head or _git(directory, "merge-base", "--is-ancestor", head, str(tracked)).returncode == 0
        )
    if head and base_commit:
        ahead = _out(directory, "rev-list", "--count", f"{base_commit}..{head}")
        if ahead is not None and ahead.isdigit():
            facts["commits_ahead"] = int(ahead)
    return facts
