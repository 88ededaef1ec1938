"""Real git repositories for reconciliation tests: a bare "remote", a clone with `main`, branches, worktrees.

Git runs with no global or system configuration (see `GIT_TEST_ENV`), so the
tests behave the same on any machine; identities are passed per commit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_TEST_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@example.com")


def git(*args: str, cwd: Path) -> str:
    completed = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_TEST_ENV},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert completed.returncode == 0, f"git {' '.join(args)} failed: {completed.stderr}"
    return completed.stdout.strip()


class GitWorld:
    """A bare remote and a working clone of it, both on `main` with one commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.remote = root / "remote.git"
        self.clone = root / "clone"
        root.mkdir(parents=True, exist_ok=True)
        git("init", "--bare", "-b", "main", str(self.remote), cwd=root)
        git("init", "-b", "main", str(self.clone), cwd=root)
        self.commit_file("README.md", "hello\n", "initial commit")
        git("remote", "add", "origin", str(self.remote), cwd=self.clone)
        git("push", "-q", "origin", "main", cwd=self.clone)

    @property
    def url(self) -> str:
        return self.remote.as_uri()

    def commit_file(self, name: str, content: str, message: str, *, where: Path | None = None) -> str:
        where = where or self.clone
        (where / name).write_text(content)
        git("add", name, cwd=where)
        git(*IDENTITY, "commit", "-q", "-m", message, cwd=where)
        return git("rev-parse", "HEAD", cwd=where)

    def branch(self, name: str, *, commits: int = 0) -> None:
        """Create `name` from main in the clone, with `commits` commits of its own."""
        git("branch", name, "main", cwd=self.clone)
        if commits:
            git("checkout", "-q", name, cwd=self.clone)
            for number in range(commits):
                self.commit_file(f"{name.replace('/', '-')}-{number}.txt", f"{number}\n", f"work {number}")
            git("checkout", "-q", "main", cwd=self.clone)

    def merge(self, name: str) -> None:
        git(*IDENTITY, "merge", "-q", "--no-ff", "-m", f"merge {name}", name, cwd=self.clone)

    def push(self, name: str) -> None:
        git("push", "-q", "origin", name, cwd=self.clone)

    def add_worktree(self, branch: str, *, commits: int = 0) -> Path:
        """A linked worktree on a new branch from main, with `commits` commits made in it."""
        path = self.root / "worktrees" / branch.replace("/", "-")
        git("worktree", "add", "-q", "-b", branch, str(path), "main", cwd=self.clone)
        for number in range(commits):
            self.commit_file(f"wt-{number}.txt", f"{number}\n", f"worktree work {number}", where=path)
        return path.resolve()

    def remove_worktree(self, path: Path) -> None:
        git("worktree", "remove", "--force", str(path), cwd=self.clone)

    def heads(self) -> set[str]:
        return set(git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=self.clone).split())
