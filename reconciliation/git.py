"""Reading git with the real `git` binary (SPEC §7), never inside a database transaction.

Every call has a timeout and a scrubbed environment: no prompt for
credentials, no lookup of a repository above the configured path, and only
the ordinary transports (no `ext::` command execution from a project's
repository field). Anything git refuses becomes a `GitError` carrying git's
own message, which reconciliation records on the run instead of crashing.

No value from the ledger ever reaches git as an option (issue 27, H1): an
export file or a bad row once carried `base_commit "--output=/"`, which
`git diff` read as an option and used to truncate a file. So every helper
checks what it passes — a commit against `COMMIT_SHA`, a branch against
`SAFE_BRANCH`, a path for being absolute — and every call puts
`--end-of-options` before its revisions and paths, so git itself would read
a value that slipped through as a revision, never as an option. Branches are
passed as full `refs/heads/...` names, so a name can never be read as an
abbreviated ref of another kind either.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

GIT_TIMEOUT_SECONDS = 30
# A fetch of the landing target may bring many objects the first time.
FETCH_TIMEOUT_SECONDS = 120
# Refs reconciliation writes (the fetched landing target): never a branch, never a remote-tracking ref.
PRIVATE_REFS_PREFIX = "refs/leasehold/"
# Transports a project's repository may use.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
HEADS_PREFIX = "refs/heads/"
# The trailer agents' commits carry (SPEC §15.1): `Leasehold-Label: <label>`.
LABEL_TRAILER = "Leasehold-Label"
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
# A branch name git accepts and reads as one ref: no leading `-` or `/`, no `..`, `@{`, `//`,
# whitespace, control or glob characters, nothing git gives a meaning in a revision (`~^:\\`).
SAFE_BRANCH = re.compile(r"^(?![-/.])(?!.*(?:\.\.|@\{|//|/\.))[^\x00-\x20\x7f~^:?*\[\\]{1,255}(?<![/.])(?<!\.lock)$")
END_OF_OPTIONS = "--end-of-options"
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:")
_MESSAGE_MAX_CHARS = 500


@dataclass(frozen=True)
class BoundedDiff:
    """At most the first `max_bytes` of a patch, and whether there was more."""

    text: str
    truncated: bool


class GitError(Exception):
    """git could not answer: missing path, not a repository, unreachable URL, timeout."""


def is_url(repository: str) -> bool:
    """A URL (`https://…`, `file://…`, `git@host:path`) is read with `ls-remote`; anything else is a path."""
    return "://" in repository or bool(_SCP_LIKE.match(repository))


# Variables that would point git at some other repository than the one asked about.
_REPOSITORY_OVERRIDES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


def _environment(ceiling: Path | None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in _REPOSITORY_OVERRIDES}
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
            # A background reader must not take the index lock an agent may need.
            "GIT_OPTIONAL_LOCKS": "0",
            "LC_ALL": "C",
        }
    )
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    if ceiling is not None:
        # Never fall back to a repository that merely contains the path.
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return env


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    ok_returncodes: tuple[int, ...] = (0,),
    timeout: float = GIT_TIMEOUT_SECONDS,
    stdin_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one git command (with `stdin_text` on its standard input, if any); raise `GitError` on a timeout, a missing
    binary or an unexpected exit code."""
    command = ["git", *(("-C", str(cwd)) if cwd is not None else ()), *args]
    try:
        completed = subprocess.run(
            command,
            capture_output=True,
            # Paths and ref names are bytes to git; an odd byte must not crash a run.
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            env=_environment(cwd.parent if cwd is not None else None),
            input=stdin_text,
            stdin=None if stdin_text is not None else subprocess.DEVNULL,
            # Without a repository to read, run outside any, so that the
            # server's own checkout lends no remotes or URL rewrites.
            cwd=None if cwd is not None else os.path.abspath(os.sep),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} timed out after {timeout:g} s") from None
    except OSError as exc:
        raise GitError(f"git could not be started: {exc}") from None
    if completed.returncode not in ok_returncodes:
        message = (completed.stderr or completed.stdout).strip() or f"exit code {completed.returncode}"
        raise GitError(f"git {args[0]}: {message[:_MESSAGE_MAX_CHARS]}")
    return completed


def _parse_heads(output: str, *, separator: str | None) -> dict[str, str]:
    heads: dict[str, str] = {}
    for line in output.splitlines():
        sha, _, ref = line.partition("\t" if separator is None else separator)
        if ref.startswith(HEADS_PREFIX):
            heads[ref.removeprefix(HEADS_PREFIX)] = sha.strip()
    return heads


def is_commit(value: str | None) -> bool:
    """A full commit id (40 lowercase hex characters): the only form of a commit the helpers pass to git."""
    return isinstance(value, str) and bool(COMMIT_SHA.match(value))


def _branch(name: str) -> str:
    """`refs/heads/<name>`, or GitError when the name is not one git could only read as a branch."""
    if not isinstance(name, str) or not SAFE_BRANCH.match(name):
        raise GitError(f"{str(name)[:100]!r} is not a branch name git would read as one")
    return HEADS_PREFIX + name


def _absolute_path(path: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path) or any(ord(c) < 0x20 or c == "\x7f" for c in path):
        raise GitError(f"{str(path)[:100]!r} is not an absolute path")
    return path


def _url(url: str) -> str:
    if not isinstance(url, str) or not url or url.startswith("-") or any(ord(c) < 0x20 for c in url):
        raise GitError(f"{str(url)[:100]!r} is not a repository URL")
    return url


def remote_heads(url: str) -> dict[str, str]:
    """Branch name → tip sha of a repository known only by URL (`git ls-remote --heads`)."""
    _url(url)
    return _parse_heads(run_git(["ls-remote", "--heads", END_OF_OPTIONS, url]).stdout, separator=None)


@dataclass(frozen=True)
class Worktree:
    """One entry of `git worktree list --porcelain`."""

    path: str
    head: str = ""
    branch: str | None = None  # short name; None when detached or bare
    is_main: bool = False
    bare: bool = False
    locked: bool = False
    prunable: bool = False


@dataclass
class _WorktreeBuilder:
    path: str
    attributes: dict[str, str] = field(default_factory=dict)

    def build(self, *, is_main: bool) -> Worktree:
        branch = self.attributes.get("branch")
        return Worktree(
            path=self.path,
            head=self.attributes.get("HEAD", ""),
            branch=branch.removeprefix(HEADS_PREFIX) if branch and branch.startswith(HEADS_PREFIX) else None,
            is_main=is_main,
            bare="bare" in self.attributes,
            locked="locked" in self.attributes,
            prunable="prunable" in self.attributes,
        )


def parse_worktrees(porcelain: str) -> list[Worktree]:
    """Parse `git worktree list --porcelain`; the first entry is the main worktree."""
    builders: list[_WorktreeBuilder] = []
    for line in porcelain.splitlines():
        key, _, value = line.partition(" ")
        if key == "worktree":
            builders.append(_WorktreeBuilder(path=value))
        elif builders and key:
            builders[-1].attributes[key] = value
    return [builder.build(is_main=index == 0) for index, builder in enumerate(builders)]


class LocalRepository:
    """A repository on this machine, read in place."""

    def __init__(self, path: str) -> None:
        resolved = Path(path).expanduser()
        if not resolved.is_absolute():
            raise GitError(f"repository path {path!r} is not absolute")
        if not resolved.is_dir():
            raise GitError(f"repository path {path!r} does not exist or is not a directory")
        self.path = resolved.resolve()

    def _git(self, *args: str, ok_returncodes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        return run_git(args, cwd=self.path, ok_returncodes=ok_returncodes)

    def heads(self) -> dict[str, str]:
        """Branch name → tip sha (`git for-each-ref refs/heads`)."""
        output = self._git("for-each-ref", "--format=%(objectname) %(refname)", END_OF_OPTIONS, HEADS_PREFIX).stdout
        return _parse_heads(output, separator=" ")

    def heads_and_tip_times(self) -> tuple[dict[str, str], dict[str, datetime]]:
        """Branch name → tip sha, and branch name → its tip's committer time, in one `for-each-ref`."""
        output = self._git(
            "for-each-ref", "--format=%(objectname) %(committerdate:unix) %(refname)", END_OF_OPTIONS, HEADS_PREFIX
        ).stdout
        heads: dict[str, str] = {}
        times: dict[str, datetime] = {}
        for line in output.splitlines():
            sha, stamp, ref = [*line.split(" ", 2), "", ""][:3]
            if not ref.startswith(HEADS_PREFIX):
                continue
            branch = ref.removeprefix(HEADS_PREFIX)
            heads[branch] = sha.strip()
            if stamp.isdigit():
                times[branch] = datetime.fromtimestamp(int(stamp), tz=UTC)
        return heads, times

    def commits_since(self, branch: str, *, base_commit: str) -> int | None:
        """Commits on `branch` that `base_commit` lacks; None when this repository does not have that commit.

        None too for a value that is not a commit id or a branch name: the
        ledger's word is not git's to interpret.
        """
        if not is_commit(base_commit) or not SAFE_BRANCH.match(branch):
            return None
        completed = self._git(
            "rev-list", "--count", END_OF_OPTIONS, f"{base_commit}..{_branch(branch)}", ok_returncodes=(0, 128)
        )
        output = completed.stdout.strip()
        return int(output) if completed.returncode == 0 and output.isdigit() else None

    def history_of(self, branch: str) -> list[tuple[str, list[str]]]:
        """Every commit reachable from `branch` (and its remote-tracking copies), with its Leasehold-Label trailers.

        What is merged into the default branch: an ancestor, or a commit
        (a squash, a cherry-pick) whose trailer names the work.
        """
        output = self._git(
            "log",
            f"--format=%H%x1f%(trailers:key={LABEL_TRAILER},valueonly,separator=%x1e)",
            f"--glob=refs/remotes/*/{_branch(branch).removeprefix(HEADS_PREFIX)}",
            END_OF_OPTIONS,
            HEADS_PREFIX + branch,
            "--",
        ).stdout
        history: list[tuple[str, list[str]]] = []
        for line in output.splitlines():
            sha, _, trailers = line.partition("\x1f")
            if sha:
                history.append((sha.strip(), [value.strip() for value in trailers.split("\x1e") if value.strip()]))
        return history

    def merge_base(self, commit: str, branch: str) -> str | None:
        """The best common ancestor of `commit` and `branch`, or None (also for a value that is not a commit id)."""
        if not is_commit(commit) or not SAFE_BRANCH.match(branch):
            return None
        completed = self._git("merge-base", END_OF_OPTIONS, commit, _branch(branch), ok_returncodes=(0, 1, 128))
        output = completed.stdout.strip()
        return output if completed.returncode == 0 and COMMIT_SHA.match(output) else None

    def changed_files(self, base: str, head: str) -> list[str] | None:
        """Paths changed between two commits (`git diff --name-only -z base..head`); None when one is unknown here.

        None too when either is not a commit id: `base "--output=/"` once made
        git write its output over the file `head` named.
        """
        if not is_commit(base) or not is_commit(head):
            return None
        completed = self._git(
            "-c",
            "core.quotepath=false",
            "diff",
            "--name-only",
            "-z",
            END_OF_OPTIONS,
            f"{base}..{head}",
            "--",
            ok_returncodes=(0, 128),
        )
        if completed.returncode != 0:
            return None
        return [name for name in completed.stdout.split("\0") if name]

    def bounded_diff(self, base: str, head: str, *, max_bytes: int) -> BoundedDiff | None:
        """The patch from `base` to `head` (`git diff base..head`), at most `max_bytes` of it.

        Read as it streams: git is stopped once `max_bytes` are read, so a huge branch costs
        `max_bytes` of memory, not its size. None when either is not a commit id or is unknown here.
        No external diff driver or textconv filter runs (a repository's config chooses those).
        """
        if not is_commit(base) or not is_commit(head):
            return None
        args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", END_OF_OPTIONS, f"{base}..{head}", "--"]
        command = ["git", "-C", str(self.path), *args]
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen(
                    command,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    stdin=subprocess.DEVNULL,
                    env=_environment(self.path.parent),
                )
            except OSError as exc:
                raise GitError(f"git could not be started: {exc}") from None
            timer = threading.Timer(GIT_TIMEOUT_SECONDS, process.kill)
            timer.start()
            try:
                assert process.stdout is not None
                data = process.stdout.read(max_bytes + 1)
                truncated = len(data) > max_bytes
                if truncated:
                    process.kill()
                returncode = process.wait()
            finally:
                timer.cancel()
                if process.stdout is not None:
                    process.stdout.close()
        if truncated:
            data = data[:max_bytes]
        elif returncode == 128:
            return None  # a commit this repository does not have
        elif returncode != 0:
            raise GitError(f"git diff: exit code {returncode}")
        return BoundedDiff(text=data.decode("utf-8", errors="replace"), truncated=truncated)

    def is_ancestor(self, branch: str, of: str) -> bool:
        """Whether every commit of `branch` is in `of` (`git merge-base --is-ancestor`): merged."""
        completed = self._git(
            "merge-base", "--is-ancestor", END_OF_OPTIONS, _branch(branch), _branch(of), ok_returncodes=(0, 1)
        )
        return completed.returncode == 0

    def contains(self, commit: str, tip: str) -> bool:
        """Whether `commit` is an ancestor of (or is) `tip`; False when either is unknown here or not a commit id."""
        if not is_commit(commit) or not is_commit(tip):
            return False
        completed = self._git("merge-base", "--is-ancestor", END_OF_OPTIONS, commit, tip, ok_returncodes=(0, 1, 128))
        return completed.returncode == 0

    def known_commits(self, commits: Sequence[str]) -> set[str]:
        """Those of `commits` this repository holds as commits: one `git cat-file --batch-check` for them all."""
        wanted = sorted({commit for commit in commits if is_commit(commit)})
        if not wanted:
            return set()
        output = run_git(
            ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
            cwd=self.path,
            stdin_text="".join(f"{commit}\n" for commit in wanted),
        ).stdout
        return {line.split()[0] for line in output.splitlines() if line.endswith(" commit")}

    def commits_between(self, old: str, new: str, *, limit: int) -> set[str] | None:
        """The commits `new` has that `old` lacks (`git rev-list old..new`), when `old` is an ancestor of `new`.

        None when `new` rewrote `old` away (not a fast-forward), either is unknown here or not a
        commit id, or there are more than `limit` of them.
        """
        if not self.contains(old, new):
            return None
        completed = self._git(
            "rev-list", f"--max-count={limit + 1}", END_OF_OPTIONS, f"{old}..{new}", ok_returncodes=(0, 128)
        )
        commits = set(completed.stdout.split())
        return commits if completed.returncode == 0 and len(commits) <= limit else None

    def has_commit(self, commit: str) -> bool:
        """Whether this repository holds the commit (`git cat-file -e`)."""
        if not is_commit(commit):
            return False
        completed = self._git("cat-file", "-e", END_OF_OPTIONS, f"{commit}^{{commit}}", ok_returncodes=(0, 1, 128))
        return completed.returncode == 0

    def fetch_branch(self, url: str, branch: str, *, into: str) -> str:
        """Fetch one branch of `url` into the private ref `into` (never a branch or a remote-tracking ref); its tip.

        The only write reconciliation makes to a repository besides pruning: objects, and a ref under
        `refs/leasehold/` that no agent's worktree uses. No tags, no FETCH_HEAD, no automatic gc.
        """
        if not into.startswith(PRIVATE_REFS_PREFIX) or not SAFE_BRANCH.match(into):
            raise GitError(f"{into[:100]!r} is not a private ref")
        run_git(
            [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-auto-gc",
                "--no-recurse-submodules",
                END_OF_OPTIONS,
                _url(url),
                f"+{_branch(branch)}:{into}",
            ],
            cwd=self.path,
            timeout=FETCH_TIMEOUT_SECONDS,
        )
        tip = self._git("rev-parse", "--verify", "--quiet", END_OF_OPTIONS, f"{into}^{{commit}}").stdout.strip()
        if not is_commit(tip):
            raise GitError(f"git fetch left {into} at {tip[:100]!r}")
        return tip

    def commits_ahead(self, branch: str, of: str) -> int:
        """How many commits `branch` has that `of` lacks (`git rev-list --count of..branch`)."""
        output = self._git("rev-list", "--count", END_OF_OPTIONS, f"{_branch(of)}..{_branch(branch)}").stdout.strip()
        if not output.isdigit():
            raise GitError(f"git rev-list --count answered {output[:100]!r}")
        return int(output)

    def worktrees(self) -> list[Worktree]:
        return parse_worktrees(self._git("worktree", "list", "--porcelain").stdout)

    def remove_worktree(self, path: str) -> None:
        """`git worktree remove` without `--force`: git itself refuses a dirty or locked worktree."""
        self._git("worktree", "remove", END_OF_OPTIONS, _absolute_path(path))


@dataclass(frozen=True)
class Cleanliness:
    modified: int
    untracked: int

    @property
    def clean(self) -> bool:
        return self.modified == 0 and self.untracked == 0


def worktree_cleanliness(path: str) -> Cleanliness:
    """Count uncommitted changes and untracked files (`git status --porcelain`); ignored files do not count.

    Ignored files are what git itself removes with a worktree without
    `--force`; anything else would be lost work.
    """
    output = run_git(["status", "--porcelain", "--untracked-files=all"], cwd=Path(_absolute_path(path))).stdout
    lines = [line for line in output.splitlines() if line.strip()]
    untracked = sum(1 for line in lines if line.startswith("??"))
    return Cleanliness(modified=len(lines) - untracked, untracked=untracked)
