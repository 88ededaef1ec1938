"""The git primitives of a landing (SPEC §21.2): fetch, the scratch worktree, a merge by the method, the CAS push.

Everything runs in the lander's clone (`--repo`) with the real `git` binary,
no prompt, a timeout, and no hooks (`core.hooksPath=/dev/null`: an agent's
trailer hook must not stamp the lander's commits). The lander's own refs live
under `refs/leasehold/land/<pid>/` of the clone and are deleted afterwards.

- The *source* is where the target and the task branches are fetched from
  and pushed to: the project's remote URL, else its repository path, else
  the clone's `origin`, else the clone itself.
- Merges by `merge` and `squash` are built without a worktree (`Merger`:
  `git merge-tree --write-tree`, `git commit-tree`); `rebase` replays in the
  scratch worktree.
- The scratch worktree is a detached worktree under a temporary directory,
  made at the first candidate it checks out, reused for the next ones and
  always removed (`Scratch` is a context manager); an agent's worktree is
  never touched.
- The push is a compare-and-swap on the target ref: `git push
  --force-with-lease=refs/heads/T:<old tip> SOURCE <new>:refs/heads/T`. The
  receiving side updates the ref only if it still points at the old tip, so
  a target that moved is never overwritten (the new commit descends from the
  old tip, so the push is a fast-forward of exactly what was merged). A local
  repository whose target branch is checked out refuses such a push by
  default; the lander pushes there with `receive.denyCurrentBranch=
  updateInstead` for that one push, which moves the branch *and* its clean
  working tree together, and refuses (the landing fails, nothing is moved)
  when that checkout has uncommitted changes. `git update-ref` was not used:
  it would move a checked-out branch under its working tree, which then shows
  the landed work as reverted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

GIT_TIMEOUT_SECONDS = 300
LANDER_NAME = "Leasehold lander"
LANDER_EMAIL = "lander@leasehold.invalid"
UPDATE_INSTEAD = "git -c receive.denyCurrentBranch=updateInstead receive-pack"
NO_HOOKS = ("-c", f"core.hooksPath={os.devnull}")


class LandGitError(Exception):
    """git failed where a landing cannot go on (a fetch, the worktree, a push refused for another reason)."""


@dataclass(frozen=True)
class LandTask:
    """One task of a landing, as `/landings/next/` names it."""

    key: str
    branch: str
    head_commit: str
    title: str = ""
    label: str = ""


@dataclass
class Merged:
    """The result of merging one task onto a commit (`before`)."""

    ok: bool
    paths: list[str] = field(default_factory=list)  # the conflicting paths
    already: bool = False  # the task's head was already in `before`: nothing merged
    commit: str = ""  # the merged commit (`before` itself when `already`); empty on a conflict


def git_environment(clone: Path) -> dict[str, str]:
    """git's environment: no prompt, C locale, and the lander's identity when the clone has none."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    env.pop("LEASEHOLD_TOKEN", None)
    configured = subprocess.run(
        ["git", "config", "user.email"], cwd=clone, capture_output=True, text=True, env=env, check=False
    )
    if not configured.stdout.strip():
        for kind in ("AUTHOR", "COMMITTER"):
            env.setdefault(f"GIT_{kind}_NAME", LANDER_NAME)
            env.setdefault(f"GIT_{kind}_EMAIL", LANDER_EMAIL)
    return env


class Git:
    """git in one directory with the lander's environment."""

    def __init__(self, cwd: Path, env: dict[str, str], spent: list[float] | None = None) -> None:
        self.cwd = cwd
        self.env = env
        self.spent = spent if spent is not None else [0.0]  # seconds in git, shared with the clone's worktrees

    def run(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        started = time.perf_counter()
        try:
            done = subprocess.run(
                ["git", *NO_HOOKS, *args],
                cwd=self.cwd,
                env=self.env,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            raise LandGitError("git is not installed (no `git` on PATH).") from None
        except subprocess.TimeoutExpired:
            raise LandGitError(f"git {args[0]} took longer than {GIT_TIMEOUT_SECONDS} s in {self.cwd}.") from None
        finally:
            self.spent[0] += time.perf_counter() - started
        if check and done.returncode != 0:
            complaint = next((line for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
            raise LandGitError(f"git {' '.join(args[:2])} failed in {self.cwd}: {complaint.strip()}")
        return done

    def out(self, *args: str) -> str | None:
        done = self.run(*args, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    def has_commit(self, commit: str) -> bool:
        return self.run("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0

    def missing_commits(self, commits: list[str]) -> set[str]:
        """The commits of `commits` this repository does not have (one `git cat-file --batch-check`)."""
        if not commits:
            return set()
        asked = "".join(f"{commit}^{{commit}}\n" for commit in commits)
        answers = self.run("cat-file", "--batch-check=%(objecttype)", stdin=asked).stdout.splitlines()
        return {commit for commit, answer in zip(commits, answers, strict=False) if answer != "commit"} | set(
            commits[len(answers) :]
        )

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode == 0


def resolve_source(clone: Git, *, remote: str, repository: str) -> str:
    """Where to fetch from and push to: the project's remote, its repository, the clone's origin, the clone."""
    if remote:
        return remote
    if repository:
        return repository
    if "origin" in (clone.out("remote") or "").split():
        return "origin"
    return str(clone.cwd)


class Refs:
    """The lander's own refs in the clone (`refs/leasehold/land/<pid>/…`): fetched heads stay reachable."""

    def __init__(self, clone: Git) -> None:
        self.clone = clone
        self.prefix = f"refs/leasehold/land/{os.getpid()}"

    def target(self) -> str:
        return f"{self.prefix}/target"

    def task(self, index: int) -> str:
        return f"{self.prefix}/task/{index}"

    def remove(self) -> None:
        listed = self.clone.out("for-each-ref", "--format=%(refname)", self.prefix) or ""
        if listed:
            deletions = "".join(f"delete {ref}\n" for ref in listed.split())
            self.clone.run("update-ref", "--stdin", stdin=deletions, check=False)


def remote_tip(clone: Git, source: str, target: str) -> str | None:
    """The commit the source has for the target branch now (asks it), or None when there is no such branch."""
    listed = clone.run("ls-remote", source, f"refs/heads/{target}").stdout.split()
    return listed[0] if listed else None


def fetch(clone: Git, refs: Refs, source: str, target: str, tasks: list[LandTask]) -> tuple[str, dict[str, str]]:
    """Fetch the target and the tasks' heads: (the target's tip, {task key: why its head is missing}).

    One fetch of the target and the branches of the heads the clone lacks (one
    by one only when that fails: a missing branch fails the whole fetch), then
    the heads still missing by their commit ids.
    """
    absent = clone.missing_commits([task.head_commit for task in tasks])
    wanted = [(index, task) for index, task in enumerate(tasks) if task.head_commit in absent]
    specs = [f"+refs/heads/{task.branch}:{refs.task(index)}" for index, task in wanted]
    target_spec = f"+refs/heads/{target}:{refs.target()}"
    if clone.run("fetch", "--quiet", "--no-tags", source, target_spec, *specs, check=False).returncode != 0:
        clone.run("fetch", "--quiet", "--no-tags", source, target_spec)
        for spec in specs:
            clone.run("fetch", "--quiet", "--no-tags", source, spec, check=False)
    tip = clone.out("rev-parse", "--verify", f"{refs.target()}^{{commit}}")
    if not tip:
        raise LandGitError(f"{source} has no branch {target!r}.")
    absent = clone.missing_commits([task.head_commit for _, task in wanted])
    if absent:
        if clone.run("fetch", "--quiet", "--no-tags", source, *sorted(absent), check=False).returncode != 0:
            for commit in sorted(absent):
                clone.run("fetch", "--quiet", "--no-tags", source, commit, check=False)
        absent = clone.missing_commits(sorted(absent))
    missing: dict[str, str] = {}
    updates: list[str] = []
    for index, task in wanted:
        if task.head_commit in absent:
            missing[task.key] = f"head {task.head_commit} of {task.branch} could not be fetched from {source}"
        else:
            updates.append(f"update {refs.task(index)} {task.head_commit}\n")
    if updates:
        clone.run("update-ref", "--stdin", stdin="".join(updates))
    return tip, missing


def labels_between(tree: Git, base: str, head: str, fallback: str) -> list[str]:
    """The `Leasehold-Label` trailers of the commits in base..head, oldest first, each once."""
    listed = tree.out("log", "--reverse", "--format=%(trailers:key=Leasehold-Label,valueonly)", f"{base}..{head}")
    found: list[str] = []
    for line in (listed or "").splitlines():
        value = line.strip()
        if value and value not in found:
            found.append(value)
    return found or ([fallback] if fallback else [])


class Scratch:
    """A detached worktree of the clone under a temporary directory, made when first needed; removed on exit.

    One per landing try, however many candidates it checks: `checkout` moves
    it to a candidate commit (the tree exactly that commit's, whatever the
    previous check left behind is gone). A landing that merges by `merge` or
    `squash` without a check never makes it (its merges are built without a
    worktree: `Merger`).
    """

    def __init__(self, clone: Git) -> None:
        self.clone = clone
        self.directory = Path(tempfile.mkdtemp(prefix="leasehold-land-"))
        self.path = self.directory / "tree"
        self.tree = Git(self.path, clone.env, clone.spent)
        self.made = False

    def __enter__(self) -> Scratch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.remove()

    def remove(self) -> None:
        if self.made:
            self.clone.run("worktree", "remove", "--force", str(self.path), check=False)
            self.made = False
            self.clone.run("worktree", "prune", check=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def head(self) -> str:
        return str(self.tree.out("rev-parse", "HEAD"))

    def checkout(self, commit: str) -> None:
        """HEAD at `commit`, the tree exactly that commit's (what a check left behind is gone)."""
        if not self.made:
            self.clone.run("worktree", "add", "--quiet", "--detach", str(self.path), commit)
            self.made = True
            return
        self.tree.run("checkout", "--quiet", "--force", "--detach", commit)
        self.tree.run("clean", "-qfdx")


class Merger:
    """Merge one task onto a commit by the method: a new commit, or a conflict with its paths.

    `merge` and `squash` are built without a worktree: `git merge-tree
    --write-tree` (the same merge machinery as `git merge`, ort) writes the
    merged tree, `git commit-tree` the commit on top of `before` (two parents
    for `merge`: a `--no-ff` merge commit; one for `squash`, with the task's
    labels as trailers). Two git processes per merge, nothing checked out.
    `rebase` replays the task's commits in the scratch worktree (`git rebase`
    needs one). A task whose head is already in `before` merges to `before`
    itself (`already`): nothing is made.
    """

    def __init__(self, clone: Git, scratch: Scratch) -> None:
        self.clone = clone
        self.scratch = scratch
        self.trees: dict[str, str] = {}  # commit → its tree, for the commits made or asked about here

    def merge(self, before: str, task: LandTask, method: str) -> Merged:
        if method == "rebase":
            return self._rebase(before, task)
        done = self.clone.run(
            "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", before, task.head_commit, check=False
        )
        fields = done.stdout.split("\0")
        if done.returncode != 0 or not fields[0]:
            # 1: conflicts (their paths follow the tree); anything else (unrelated histories): no paths to name.
            paths = sorted({name for name in fields[1:] if name}) if done.returncode == 1 else []
            return Merged(ok=False, paths=paths)
        tree = fields[0].strip()
        if tree == self._tree(before) and self.clone.is_ancestor(task.head_commit, before):
            return Merged(ok=True, already=True, commit=before)
        if method == "squash":
            labels = labels_between(self.clone, before, task.head_commit, task.label)
            trailers = "".join(f"\nLeasehold-Label: {label}" for label in labels)
            subject = f"{task.key}: {task.title}".rstrip(": ")
            message = f"{subject}\n\nSquashed from {task.branch} at {task.head_commit}.\n{trailers}".rstrip()
            parents = ["-p", before]
        else:
            subject = f"Merge {task.key}: {task.title}".rstrip(": ")
            message = f"{subject}\n\nBranch {task.branch} at {task.head_commit}."
            parents = ["-p", before, "-p", task.head_commit]
        commit = self.clone.run("commit-tree", tree, *parents, "-m", message).stdout.strip()
        self.trees[commit] = tree
        return Merged(ok=True, commit=commit)

    def _tree(self, commit: str) -> str:
        if commit not in self.trees:
            self.trees[commit] = str(self.clone.out("rev-parse", f"{commit}^{{tree}}"))
        return self.trees[commit]

    def _rebase(self, before: str, task: LandTask) -> Merged:
        if self.clone.is_ancestor(task.head_commit, before):
            return Merged(ok=True, already=True, commit=before)
        scratch = self.scratch
        scratch.checkout(task.head_commit)
        if scratch.tree.run("rebase", "--quiet", before, check=False).returncode != 0:
            listed = scratch.tree.out("diff", "--name-only", "--diff-filter=U") or ""
            scratch.tree.run("rebase", "--abort", check=False)
            return Merged(ok=False, paths=sorted({line for line in listed.splitlines() if line}))
        head = scratch.head()
        if not self.clone.is_ancestor(before, head):  # never: rebase replays onto `before`
            raise LandGitError(f"rebasing {task.branch} did not end on top of {before}.")
        return Merged(ok=True, commit=head)


def push(clone: Git, source: str, target: str, *, old: str, new: str) -> bool:
    """Compare-and-swap the source's target from `old` to `new`: True when pushed, False when the target moved.

    Any other refusal (no rights, a dirty checked-out target) is a
    `LandGitError`: the target did not move, and the landing cannot land.
    """
    ref = f"refs/heads/{target}"
    args = ["push", "--quiet", "--porcelain", f"--force-with-lease={ref}:{old}"]
    if _is_local_checkout(source):
        args.append(f"--receive-pack={UPDATE_INSTEAD}")
    done = clone.run(*args, source, f"{new}:{ref}", check=False)
    if done.returncode == 0:
        return True
    now = remote_tip(clone, source, target)
    if now == new:  # the push went through, its answer did not
        return True
    if now != old:
        return False
    complaint = " ".join(line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip())
    raise LandGitError(f"pushing {target} to {source} was refused: {complaint[:500]}")


def _is_local_checkout(source: str) -> bool:
    """A non-bare repository on this machine: its checked-out branch moves only with its working tree."""
    path = Path(source).expanduser()
    return path.is_dir() and (path / ".git").exists()
