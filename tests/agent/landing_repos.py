"""Real git for the lander's tests: a bare remote, an agents' clone that pushes task branches, a lander's clone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.land.engine import LandingPlan
from agent.land.git import LandTask
from tests.agent.gitrepos import Repos, git, make_repos


@dataclass
class Landing:
    repos: Repos
    lander: Path  # the lander's own clone

    @property
    def remote(self) -> Path:
        return self.repos.remote

    def deliver(self, key: str, files: dict[str, str], *, base: str = "main", commits: int = 1) -> LandTask:
        """A task branch off `base` with `commits` commits writing `files`, each with its label trailer, pushed."""
        clone = self.repos.clone
        branch = f"feature/{key.lower()}"
        git(clone, "fetch", "-q", "origin")
        git(clone, "checkout", "-q", "-B", branch, f"origin/{base}")
        label = f"{key.lower()}-a1"
        for number in range(commits):
            for name, text in files.items():
                path = clone / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text + (f"{number}\n" if number else ""))
                git(clone, "add", name)
            git(clone, "commit", "-q", "-m", f"{key} part {number + 1}\n\nLeasehold-Label: {label}")
        git(clone, "push", "-q", "-f", "origin", branch)
        head = git(clone, "rev-parse", "HEAD")
        git(clone, "checkout", "-q", "main")
        return LandTask(key=key, branch=branch, head_commit=head, title=f"Task {key}", label=label)

    def push_to_main(self, name: str, text: str) -> str:
        """Someone else pushes to the target from outside."""
        clone = self.repos.clone
        git(clone, "checkout", "-q", "main")
        git(clone, "pull", "-q", "--ff-only", "origin", "main")
        head = self.repos.commit(clone, name, text, f"outside change {name}")
        git(clone, "push", "-q", "origin", "main")
        return head

    def tip(self) -> str:
        return git(self.remote, "rev-parse", "refs/heads/main")

    def plan(
        self, tasks: list[LandTask], *, method: str = "merge", check: str = "", timeout: float = 60
    ) -> LandingPlan:
        return LandingPlan(
            source=str(self.remote),
            target="main",
            method=method,
            tasks=tasks,
            check_command=check,
            check_timeout_seconds=timeout,
        )

    def worktrees(self) -> list[str]:
        return [
            line
            for line in git(self.lander, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")
        ]


def make_landing(root: Path) -> Landing:
    repos = make_repos(root)
    lander = root / "lander"
    git(root, "clone", "-q", str(repos.remote), str(lander))
    return Landing(repos=repos, lander=lander)
