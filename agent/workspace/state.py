"""Where this machine keeps the attempts it holds (SPEC §15.3): one state file per agent per attempt.

- `<config dir>/attempts/<agent handle>/<task key>.json`, mode 0600 in 0700
  directories, written atomically (a fresh temporary file, then
  `os.replace`) while holding an exclusive `fcntl` lock on the agent's
  `.lock` file. Two agents (or two processes of one agent) sharing one config
  directory never overwrite each other: each attempt has its own file, and a
  write never replaces a newer attempt of the same task with an older one.
- The lease token lives only there and in the memory of the process keeping
  the lease alive; it is never printed, logged or put in argv/environment.
- A worktree made by `leasehold run --worktree` / `workspace open` holds a
  pointer, `leasehold-attempt.json` in that worktree's own git directory
  (`.git/worktrees/<name>/`, what `git rev-parse --git-dir` names), saying
  which agent's attempt on which task works there; `current()` called from
  inside that worktree acts on that attempt.
- `known_agent`/`remember_agent` cache which agent handle a (server, token)
  pair is, so that a command can find its agent's directory without asking
  the server.

Nothing here talks to the server or runs git.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from agent.client.models import Claim, Lease, is_past, sha256_hex
from agent.client.records import Record
from agent.workspace.config import write_private

POINTER_NAME = "leasehold-attempt.json"
IDENTITIES_NAME = "agents.json"
# Agent handles and task keys as the server makes them (SPEC §5); anything else could escape the directory.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class AmbiguousAttempt(Exception):
    """Several attempts are held and nothing says which one a command means (exit 2)."""


class HeldAttempt(Record):
    """One live (or just lost) attempt this machine holds (a record, `agent.client.records`; the token is kept
    out of its `repr`)."""

    __slots__ = (  # noqa: RUF023 (the fields in order)
        "server", "agent", "task", "attempt_id", "epoch", "lease_token", "lease_expires_at", "renew_every_seconds",
        "label", "branch", "base_commit", "worktree", "owner", "pid", "lost", "lost_reason", "renew_attempts",
    )  # fmt: skip
    REPR_HIDDEN: ClassVar[frozenset[str]] = frozenset({"lease_token"})
    server: str
    agent: str
    task: str
    attempt_id: int
    epoch: int
    lease_token: str
    lease_expires_at: str
    renew_every_seconds: int
    label: str
    branch: str | None
    base_commit: str | None
    worktree: str | None
    owner: str
    pid: int | None
    lost: bool
    lost_reason: str | None
    renew_attempts: int

    def __init__(
        self,
        server: str,
        agent: str,
        task: str,
        attempt_id: int,
        epoch: int,
        lease_token: str,
        lease_expires_at: str,
        renew_every_seconds: int,
        label: str,
        branch: str | None = None,
        base_commit: str | None = None,
        worktree: str | None = None,
        owner: str = "cli",
        pid: int | None = None,
        lost: bool = False,
        lost_reason: str | None = None,
        renew_attempts: int = 3,
    ) -> None:
        self.server = server
        self.agent = agent
        self.task = task
        self.attempt_id = attempt_id
        self.epoch = epoch
        self.lease_token = lease_token
        self.lease_expires_at = lease_expires_at
        self.renew_every_seconds = renew_every_seconds
        self.label = label
        self.branch = branch
        self.base_commit = base_commit
        self.worktree = worktree
        self.owner = owner
        self.pid = pid
        self.lost = lost
        self.lost_reason = lost_reason
        self.renew_attempts = renew_attempts

    @property
    def lease(self) -> Lease:
        """What the client needs for holder calls."""
        return Lease(
            attempt_id=self.attempt_id,
            token=self.lease_token,
            epoch=self.epoch,
            task=self.task,
            renew_every_seconds=self.renew_every_seconds,
            renew_attempts=self.renew_attempts,
            lease_expires_at=self.lease_expires_at,
        )

    @property
    def live(self) -> bool:
        """Not known lost and not past its expiry on this machine's clock."""
        return not self.lost and not is_past(self.lease_expires_at)

    @property
    def doubtful(self) -> bool:
        """Worth asking the server about: lost, past its expiry, or its keeper (`run`, `mcp`) is dead.

        A live attempt a live process keeps (or one `leasehold claim` wrote, whose
        holder commands learn of its end from their own answers) is trusted as is.
        """
        return not self.live or (self.owner != "cli" and not process_alive(self.pid))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeldAttempt:
        names = set(cls.__slots__)
        return cls(**{name: value for name, value in data.items() if name in names})

    @classmethod
    def from_claim(cls, claim: Claim, *, server: str, owner: str = "cli", pid: int | None = None) -> HeldAttempt:
        """The state of a fresh claim; the agent handle is the label's `owner`."""
        return cls(
            server=server,
            agent=label_owner(claim.label),
            task=claim.lease.task,
            attempt_id=claim.lease.attempt_id,
            epoch=claim.lease.epoch,
            lease_token=claim.lease.token,
            lease_expires_at=claim.lease.lease_expires_at or "",
            renew_every_seconds=claim.lease.renew_every_seconds,
            renew_attempts=claim.lease.renew_attempts,
            label=claim.label,
            branch=claim.attempt.get("branch"),
            base_commit=claim.attempt.get("base_commit"),
            owner=owner,
            pid=pid,
        )

    def describe(self) -> str:
        """One line for a human, without the token."""
        where = f" in {self.worktree}" if self.worktree else ""
        return f"{self.task} (attempt {self.attempt_id}, epoch {self.epoch}{where})"


def process_alive(pid: int | None) -> bool:
    """Whether the process `pid` (a `run` or `mcp` keeping an attempt) still runs on this machine."""
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def label_owner(label: str) -> str:
    """The agent handle a label names (`owner=…;branch=…;…`, SPEC §5)."""
    for part in label.split(";"):
        name, _, value = part.partition("=")
        if name == "owner" and value:
            return value
    raise ValueError(f"the label {label!r} names no owner")


def _safe(name: str, what: str) -> str:
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} {name!r} cannot name a state file")
    return name


def _private_dir(path: Path) -> Path:
    if not path.exists():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            path.chmod(0o700)  # mkdir's mode is filtered by the umask
    return path


def attempts_dir(config_dir: Path, agent: str) -> Path:
    """`<config dir>/attempts/<agent handle>/` (not created)."""
    return Path(config_dir) / "attempts" / _safe(agent, "agent handle")


def _state_file(config_dir: Path, agent: str, task: str) -> Path:
    return attempts_dir(config_dir, agent) / f"{_safe(task, 'task key')}.json"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on the directory's `.lock` file, for one read-modify-write."""
    _private_dir(directory)
    descriptor = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing drops the lock


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_held(path: Path) -> HeldAttempt | None:
    data = _read_json(path)
    if not data:
        return None
    try:
        return HeldAttempt.from_dict(data)
    except TypeError:
        return None  # not a state file this version wrote


def save(config_dir: Path, held: HeldAttempt) -> Path:
    """Write `held`'s state file (atomic, 0600, under the agent's lock).

    A newer attempt of the same task already there (a higher epoch) is kept:
    a late write of an older attempt (a run marking its lost lease) must not
    bring a dead token back.
    """
    path = _state_file(config_dir, held.agent, held.task)
    with _locked(path.parent):
        existing = _read_held(path)
        if existing is not None and existing.attempt_id != held.attempt_id and existing.epoch > held.epoch:
            return path
        write_private(path, held.as_dict())
    return path


def load(config_dir: Path, agent: str, task: str) -> HeldAttempt | None:
    """The state of `agent`'s attempt on `task`, if this machine holds one."""
    return _read_held(_state_file(config_dir, agent, task))


def held_by(config_dir: Path, agent: str) -> list[HeldAttempt]:
    """Every attempt `agent` holds here (live or marked lost), by task key."""
    directory = attempts_dir(config_dir, agent)
    if not directory.is_dir():
        return []
    found = (_read_held(path) for path in sorted(directory.glob("*.json")))
    return [held for held in found if held is not None]


def remove(config_dir: Path, agent: str, task: str, *, attempt_id: int | None = None) -> None:
    """Forget `agent`'s attempt on `task` (only if it is still attempt `attempt_id`, when given)."""
    path = _state_file(config_dir, agent, task)
    if not path.parent.is_dir():
        return
    with _locked(path.parent):
        if attempt_id is not None:
            existing = _read_held(path)
            if existing is None or existing.attempt_id != attempt_id:
                return
        path.unlink(missing_ok=True)


def mark_lost(config_dir: Path, held: HeldAttempt, reason: str) -> None:
    """Mark the attempt lost in its state file (if that file still holds it), so no command sends its token again."""
    path = _state_file(config_dir, held.agent, held.task)
    with _locked(path.parent):
        existing = _read_held(path)
        if existing is not None and existing.attempt_id != held.attempt_id:
            return
        held.lost, held.lost_reason = True, reason
        write_private(path, held.as_dict())


# --- worktree pointers ---------------------------------------------------------------


def git_dir_of(path: Path) -> Path | None:
    """The git directory of the checkout containing `path` (a worktree's own `.git/worktrees/<name>`), or None.

    Read from the `.git` entry without running git: a directory in the main
    checkout, a `gitdir: …` file in a linked worktree.
    """
    for directory in (Path(path).resolve(), *Path(path).resolve().parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text.split(":", 1)[1].strip())
                return (directory / target).resolve() if not target.is_absolute() else target
            return None
    return None


def write_worktree_pointer(
    worktree: Path, *, agent: str, task: str, attempt_id: int | None = None, server: str | None = None
) -> None:
    """Name the attempt working in `worktree`, in a file of that worktree's own git directory."""
    git_dir = git_dir_of(worktree)
    if git_dir is None:
        raise ValueError(f"{worktree} is not inside a git checkout")
    data = {"agent": agent, "task": task, "attempt_id": attempt_id, "server": server}
    write_private(git_dir / POINTER_NAME, data)


def read_worktree_pointer(path: Path) -> dict[str, Any] | None:
    """The pointer of the checkout containing `path` (`agent`, `task`, `attempt_id`, `server`), or None."""
    git_dir = git_dir_of(path)
    if git_dir is None:
        return None
    data = _read_json(git_dir / POINTER_NAME)
    if not data or not isinstance(data.get("agent"), str) or not isinstance(data.get("task"), str):
        return None
    return data


def current(config_dir: Path, agent: str, cwd: Path) -> HeldAttempt | None:
    """The attempt a holder command acts on, in this order:

    1. inside `leasehold run`, the run's own task (`LEASEHOLD_RUN` and
       `LEASEHOLD_TASK` in the environment);
    2. the worktree pointer of `cwd`, when it names this agent;
    3. the agent's only held attempt (or its only live one, when the others
       are marked lost or past their expiry).

    Several held and none of these says which: `AmbiguousAttempt`, naming them.
    """
    if os.environ.get("LEASEHOLD_RUN") and os.environ.get("LEASEHOLD_TASK"):
        found = load(config_dir, agent, os.environ["LEASEHOLD_TASK"])
        if found is not None:
            return found
    pointer = read_worktree_pointer(cwd)
    if pointer is not None and pointer["agent"] == agent:
        found = load(config_dir, agent, pointer["task"])
        if found is not None:
            return found
    held = held_by(config_dir, agent)
    if len(held) <= 1:
        return held[0] if held else None
    live = [item for item in held if item.live]
    if len(live) == 1:
        return live[0]
    names = ", ".join(item.describe() for item in held)
    raise AmbiguousAttempt(
        f"{agent} holds several attempts here ({names}): name one with --task KEY, or run the command in its worktree."
    )


# --- which agent a token is ----------------------------------------------------------


def _identity_key(server: str, token: str) -> str:
    return sha256_hex(f"{server}\n{token}")[:24]


def known_agent(config_dir: Path, server: str, token: str) -> str | None:
    """The agent handle last seen for this server and token, if any (the token itself is not stored here)."""
    identities = _read_json(Path(config_dir) / IDENTITIES_NAME) or {}
    handle = identities.get(_identity_key(server, token))
    return handle if isinstance(handle, str) else None


def remember_agent(config_dir: Path, server: str, token: str, agent: str) -> None:
    directory = _private_dir(Path(config_dir))
    with _locked(directory / "attempts"):
        path = directory / IDENTITIES_NAME
        identities = _read_json(path) or {}
        if identities.get(_identity_key(server, token)) == agent:
            return
        identities[_identity_key(server, token)] = agent
        write_private(path, identities)
