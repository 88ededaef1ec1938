"""The git side of a workspace (SPEC §15.1): the repository, the attempt's branch, its worktree, the facts.

`open_workspace` does what `leasehold run --worktree` and `leasehold
workspace open` need, with the real `git` binary:

1. the repository: `--repo`, else the one containing the current directory
   (its main checkout, even from inside a linked worktree);
2. the branch: fetched from `origin` when it is there (a local branch behind
   it is fast-forwarded, never moved otherwise), else the local branch, else
   created at the attempt's base commit, at `origin/<default branch>`, or at
   the local default branch when there is no remote;
3. the worktree: DIR, default `<repo parent>/<repo name>.worktrees/<task>`.
   A branch already checked out in a worktree whose attempt the ledger
   reports terminal (the attempt its pointer names, or the predecessor the
   context names there) is taken over as it is, uncommitted files included;
   one checked out by a live attempt, by the main checkout, or by a worktree
   no attempt is known for is refused (`WorkspaceError`).

Nothing is ever deleted, reset or discarded; `prune` removes only what §7
calls removable (completed, merged into the default branch, clean). git runs
with no prompt (`GIT_TERMINAL_PROMPT=0`) and a timeout, and never while the
toolkit holds a lock the server or the lease keeper waits on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.workspace import state
from agent.workspace.errors import WorkspaceError

GIT_TIMEOUT_SECONDS = 60
WORKTREE_LIST_TRIES = 5
WORKTREE_LIST_PAUSE_SECONDS = 0.2
REMOTE = "origin"


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git in `cwd`; `WorkspaceError` with git's first line of complaint when it fails and `check`."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed (no `git` on PATH).") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} took longer than {GIT_TIMEOUT_SECONDS} s in {cwd}.") from None
    if check and done.returncode != 0:
        complaint = next((line for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
        raise WorkspaceError(f"git {' '.join(args[:2])} failed in {cwd}: {complaint.strip()}")
    return done


def _out(cwd: Path, *args: str) -> str | None:
    done = git(cwd, *args, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass(frozen=True)
class Repository:
    root: Path  # the main checkout
    common_dir: Path
    has_remote: bool

    def default_worktree(self, task: str) -> Path:
        return self.root.parent / f"{self.root.name}.worktrees" / task


def find_repository(path: Path | None = None) -> Repository:
    """The repository of `path` (default: the current directory)."""
    start = Path(path or Path.cwd()).expanduser()
    if not start.is_dir():
        raise WorkspaceError(f"{start} is not a directory.")
    common = _out(start, "rev-parse", "--path-format=absolute", "--git-common-dir")
    if common is None:
        raise WorkspaceError(f"{start.resolve()} is not in a git repository (give one with --repo PATH).")
    common_dir = Path(common)
    if _out(start, "rev-parse", "--is-bare-repository") == "true" or common_dir.name != ".git":
        raise WorkspaceError(f"{common_dir} is a bare repository: give the clone agents work in with --repo PATH.")
    remotes = (_out(start, "remote") or "").split()
    return Repository(root=common_dir.parent, common_dir=common_dir, has_remote=REMOTE in remotes)


@dataclass(frozen=True)
class Worktree:
    path: Path
    head: str | None
    branch: str | None
    main: bool
    missing: bool


def worktrees(repo: Repository) -> list[Worktree]:
    """`git worktree list --porcelain`, the main checkout first.

    `git worktree add` in another process (a runner's slots share a clone) writes `.git/worktrees/NAME/` file by
    file, and a listing that meets it half-written fails ("failed to read …/commondir"): it is asked again."""
    for _ in range(WORKTREE_LIST_TRIES - 1):
        done = git(repo.root, "worktree", "list", "--porcelain", check=False)
        if done.returncode == 0:
            break
        time.sleep(WORKTREE_LIST_PAUSE_SECONDS)
    else:
        done = git(repo.root, "worktree", "list", "--porcelain")
    listing = done.stdout
    found: list[Worktree] = []
    for block in listing.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(" ")
            fields[name] = value
        if "worktree" not in fields:
            continue
        path = Path(fields["worktree"])
        branch = fields.get("branch", "").removeprefix("refs/heads/") or None
        found.append(
            Worktree(
                path, fields.get("HEAD"), branch, main=not found, missing="prunable" in fields or not path.exists()
            )
        )
    return found


def is_dirty(path: Path) -> bool:
    return bool((_out(path, "status", "--porcelain") or "").strip())


def default_branch_of(repo: Repository, named: str | None) -> str:
    """The project's default branch, else origin's HEAD, else `main` or `master` if there."""
    if named:
        return named
    remote_head = _out(repo.root, "symbolic-ref", "--quiet", "--short", f"refs/remotes/{REMOTE}/HEAD")
    if remote_head:
        return remote_head.removeprefix(f"{REMOTE}/")
    for candidate in ("main", "master"):
        if _out(repo.root, "rev-parse", "--verify", "--quiet", f"refs/heads/{candidate}"):
            return candidate
    return _out(repo.root, "symbolic-ref", "--quiet", "--short", "HEAD") or "main"


def _commit(repo: Repository, ref: str) -> str | None:
    return _out(repo.root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def remote_head(repo: Repository, branch: str) -> str | None:
    """The commit `origin` has for `branch` (asks the remote), or None."""
    if not repo.has_remote:
        return None
    listed = _out(repo.root, "ls-remote", "--heads", REMOTE, f"refs/heads/{branch}")
    return listed.split()[0] if listed else None


@dataclass
class BranchReady:
    source: str  # "origin", "local" or "created"
    start: str | None = None  # where a created branch starts
    warnings: list[str] = field(default_factory=list)


def ensure_branch(repo: Repository, branch: str, *, base_commit: str | None, default_branch: str) -> BranchReady:
    """Make `refs/heads/<branch>` exist (origin, else local, else created at the base); never moves it backwards."""
    local = _commit(repo, f"refs/heads/{branch}")
    upstream = remote_head(repo, branch)
    if upstream:
        git(repo.root, "fetch", "--quiet", REMOTE, f"+refs/heads/{branch}:refs/remotes/{REMOTE}/{branch}")
        if local is None:
            git(repo.root, "branch", "--quiet", "--track", branch, f"{REMOTE}/{branch}")
            return BranchReady("origin")
        ready = BranchReady("local")
        if local != upstream and git(repo.root, "merge-base", "--is-ancestor", local, upstream, check=False).returncode:
            if git(repo.root, "merge-base", "--is-ancestor", upstream, local, check=False).returncode:
                ready.warnings.append(f"{branch} and {REMOTE}/{branch} have diverged: working on the local branch.")
        elif local != upstream and any(tree.branch == branch for tree in worktrees(repo)):
            ready.warnings.append(f"{branch} is behind {REMOTE}/{branch}; it is checked out, so it was left as it is.")
        elif local != upstream:
            # A fast-forward (checked above): the local branch loses nothing.
            git(repo.root, "update-ref", f"refs/heads/{branch}", upstream, local)
            ready.source = "origin"
        return ready
    if local is not None:
        return BranchReady("local")
    start = _branch_start(repo, base_commit=base_commit, default_branch=default_branch)
    git(repo.root, "branch", "--quiet", "--no-track", branch, start)
    return BranchReady("created", start=start)


def _branch_start(repo: Repository, *, base_commit: str | None, default_branch: str) -> str:
    if base_commit:
        if _commit(repo, base_commit) is None and repo.has_remote:
            git(repo.root, "fetch", "--quiet", REMOTE, check=False)
        found = _commit(repo, base_commit)
        if found is None:
            raise WorkspaceError(f"The attempt's base commit {base_commit} is not in {repo.root} (nor on {REMOTE}).")
        return found
    if repo.has_remote:
        fetched = git(repo.root, "fetch", "--quiet", REMOTE, default_branch, check=False).returncode == 0
        tip = _commit(repo, f"refs/remotes/{REMOTE}/{default_branch}") if fetched else None
        if tip:
            return tip
    tip = _commit(repo, f"refs/heads/{default_branch}")
    if tip is None:
        raise WorkspaceError(f"No base to start the branch from: {repo.root} has no {default_branch!r} branch.")
    return tip


# Whether an attempt is over, per the ledger: True (terminal), False (live), None (unknown).
AttemptVerdict = Callable[[int], bool | None]


@dataclass
class Opened:
    path: Path
    branch: str
    base_commit: str | None
    branch_source: str
    taken_over_from: int | None = None  # the terminal attempt whose worktree this is
    reused: bool = False  # this attempt's own worktree, opened again
    warnings: list[str] = field(default_factory=list)


def _holder_verdict(
    tree: Worktree, repo: Repository, *, own_attempt: int, is_terminal: AttemptVerdict, predecessor: dict[str, Any]
) -> tuple[bool | None, int | None]:
    """(terminal?, attempt) of the attempt working in `tree`: from its pointer, else the context's predecessor."""
    pointer = state.read_worktree_pointer(tree.path)
    attempt = pointer.get("attempt_id") if pointer else None
    if isinstance(attempt, int):
        if attempt == own_attempt:
            return True, attempt
        verdict = is_terminal(attempt)
        if verdict is not None:
            return verdict, attempt
    named = predecessor.get("worktree_path")
    if (
        named
        and Path(named).resolve() == tree.path.resolve()
        and predecessor.get("host") in (None, socket.gethostname())
    ):
        ended = predecessor.get("status") not in (None, "active")
        return ended, predecessor.get("attempt")
    return None, attempt if isinstance(attempt, int) else None


def open_workspace(
    repo: Repository,
    *,
    task: str,
    branch: str,
    base_commit: str | None,
    default_branch: str | None,
    directory: Path | None,
    own_attempt: int,
    is_terminal: AttemptVerdict,
    predecessor: dict[str, Any] | None = None,
) -> Opened:
    """The attempt's branch checked out in a worktree: made, reused, or taken over from a terminal attempt."""
    default = default_branch_of(repo, default_branch)
    ready = ensure_branch(repo, branch, base_commit=base_commit, default_branch=default)
    trees = worktrees(repo)
    warnings = list(ready.warnings)
    if is_dirty(repo.root):
        warnings.append(f"The main checkout {repo.root} has uncommitted changes; they stay there, not in the worktree.")
    holder = next((tree for tree in trees if tree.branch == branch), None)
    if holder is not None and holder.missing:
        # Its directory is gone: only git's bookkeeping of it remains, and it blocks the checkout.
        git(repo.root, "worktree", "prune")
        holder = None
    base = base_commit or ready.start or _merge_base(repo, branch, default)
    if holder is not None:
        if holder.main:
            dirty = " (with uncommitted changes)" if is_dirty(holder.path) else ""
            raise WorkspaceError(
                f"{branch} is checked out in the main checkout {holder.path}{dirty}: switch it to another branch "
                "first; nothing was changed."
            )
        verdict, attempt = _holder_verdict(
            holder, repo, own_attempt=own_attempt, is_terminal=is_terminal, predecessor=predecessor or {}
        )
        if verdict is False:
            raise WorkspaceError(
                f"{branch} is checked out in {holder.path} by attempt {attempt}, which is still live: refusing to "
                "share a branch with a working agent."
            )
        if verdict is None:
            raise WorkspaceError(
                f"{branch} is checked out in {holder.path}, which no ended attempt is known to have left: "
                "finish the work there or remove that worktree yourself."
            )
        if directory is not None and Path(directory).resolve() != holder.path.resolve():
            warnings.append(f"{branch} is checked out in {holder.path}: working there, not in {directory}.")
        opened = Opened(holder.path, branch, base, ready.source, warnings=warnings)
        opened.reused = attempt == own_attempt
        opened.taken_over_from = None if opened.reused else attempt
        return opened
    path = Path(directory or repo.default_worktree(task)).expanduser().absolute()
    if directory is None and path.exists() and any(path.iterdir()):
        # The task's default place holds an earlier attempt's worktree of another branch: keep it, use another.
        path = path.with_name(f"{task}.{own_attempt}")
    if any(tree.path.resolve() == path.resolve() for tree in trees if path.exists()):
        raise WorkspaceError(f"{path} is already a worktree of another branch; give another DIR.")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorkspaceError(f"{path} exists and is not an empty directory; give another DIR.")
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo.root, "worktree", "add", "--quiet", str(path), branch)
    return Opened(path, branch, base, ready.source, warnings=warnings)


def _merge_base(repo: Repository, branch: str, default_branch: str) -> str | None:
    for ref in (f"refs/remotes/{REMOTE}/{default_branch}", f"refs/heads/{default_branch}"):
        if _commit(repo, ref):
            return _out(repo.root, "merge-base", f"refs/heads/{branch}", ref)
    return None


def head_facts(worktree: Path, *, branch: str | None, base_commit: str | None) -> dict[str, Any]:
    """head_commit, commits_ahead (of the base), dirty and pushed (the remote has the head) of `worktree`."""
    head = _out(worktree, "rev-parse", "--verify", "--quiet", "HEAD")
    facts: dict[str, Any] = {"dirty": is_dirty(worktree)}
    if not head:
        return facts
    facts["head_commit"] = head
    if base_commit:
        ahead = _out(worktree, "rev-list", "--count", f"{base_commit}..{head}")
        if ahead is not None and ahead.isdigit():
            facts["commits_ahead"] = int(ahead)
    facts["pushed"] = False
    remotes = (_out(worktree, "remote") or "").split()
    if branch and REMOTE in remotes:
        listed = _out(worktree, "ls-remote", "--heads", REMOTE, f"refs/heads/{branch}")
        upstream = listed.split()[0] if listed else None
        facts["pushed"] = bool(upstream) and (
            upstream == head
            or git(worktree, "merge-base", "--is-ancestor", head, str(upstream), check=False).returncode == 0
        )
    return facts


def start_facts(opened: Opened, *, base_known: bool) -> dict[str, Any]:
    """The git facts recorded once the worktree is ready: branch, base (when the attempt had none), path, host."""
    facts: dict[str, Any] = {
        "branch": opened.branch,
        "worktree_path": str(opened.path),
        "host": socket.gethostname()[:200],
    }
    if not base_known and opened.base_commit:
        facts["base_commit"] = opened.base_commit
    return facts
