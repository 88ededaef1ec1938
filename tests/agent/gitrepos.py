"""Real git repositories for the workspace tests: a bare remote, a clone with one commit on `main`."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "Test Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
}


def git_env() -> dict[str, str]:
    """The environment git runs with in tests: an identity, and no user or system config of the machine."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env.update(IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    return env


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


@dataclass
class Repos:
    remote: Path  # bare
    clone: Path  # the main checkout agents' worktrees hang off

    def commit(self, cwd: Path, name: str, text: str = "x\n", message: str | None = None) -> str:
        (cwd / name).write_text(text)
        git(cwd, "add", name)
        git(cwd, "commit", "-q", "-m", message or f"add {name}")
        return git(cwd, "rev-parse", "HEAD")


def make_repos(root: Path, *, with_remote: bool = True) -> Repos:
    root.mkdir(parents=True, exist_ok=True)
    remote = root / "remote.git"
    clone = root / "project"
    if with_remote:
        git(root, "init", "-q", "--bare", "-b", "main", str(remote))
        git(root, "clone", "-q", str(remote), str(clone))
        git(clone, "checkout", "-q", "-b", "main")
    else:
        git(root, "init", "-q", "-b", "main", str(clone))
    repos = Repos(remote=remote, clone=clone)
    repos.commit(clone, "README.md", "# project\n", "initial commit")
    if with_remote:
        git(clone, "push", "-q", "-u", "origin", "main")
    return repos


def trailers(cwd: Path, revisions: str) -> list[str]:
    """The Leasehold-Label trailer values of each commit in `revisions`, newest first (one line per commit)."""
    out = git(cwd, "log", "--format=<%(trailers:key=Leasehold-Label,valueonly,separator=%x2C)>", revisions)
    return [line.removeprefix("<").removesuffix(">") for line in out.splitlines()]
