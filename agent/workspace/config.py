"""Where the CLI keeps its login: the config file (server URL, agent token, default project).

`$LEASEHOLD_CONFIG`, default `~/.config/leasehold/config.json`
(`$XDG_CONFIG_HOME` honoured). `LEASEHOLD_URL`, `LEASEHOLD_TOKEN` and
`LEASEHOLD_PROJECT` override what it says. Inside a command that `leasehold
run` started, `LEASEHOLD_ATTEMPT_TOKEN` (SPEC §23.2) is the credential instead
of any agent token: the CLI acts on that one attempt (`Settings.attempt`). It is written atomically with mode
0600; a directory the toolkit creates for it gets 0700. The attempts held
live beside it, one state file per agent per attempt (`agent.workspace.state`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

from agent.client.records import FrozenRecord

# A temporary file's name is tried this many times before giving up (each name is 64 random bits).
TEMPORARY_NAME_TRIES = 100


class CommandAttempt(FrozenRecord):
    """The attempt a command started by `leasehold run` works on, as its environment names it (SPEC §15.2)."""

    __slots__ = ("attempt_id", "task", "epoch", "label")  # noqa: RUF023 (the fields in order)
    attempt_id: int
    task: str
    epoch: int
    label: str

    def __init__(self, attempt_id: int, task: str, epoch: int, label: str) -> None:
        self._set(attempt_id=attempt_id, task=task, epoch=epoch, label=label)


class Settings(FrozenRecord):
    """The login: server URL, token and default project; `attempt` is set when `token` is an attempt token
    (the holder commands act on that attempt, and nothing else is allowed). The token is never printed
    (kept out of `repr`, as `Lease`'s)."""

    __slots__ = ("url", "token", "project", "attempt")  # noqa: RUF023 (the fields in order)
    REPR_HIDDEN: ClassVar[frozenset[str]] = frozenset({"token"})
    url: str
    token: str
    project: str | None
    attempt: CommandAttempt | None

    def __init__(self, url: str, token: str, project: str | None = None, attempt: CommandAttempt | None = None) -> None:
        self._set(url=url, token=token, project=project, attempt=attempt)


class NotLoggedIn(Exception):
    pass


def config_path() -> Path:
    explicit = os.environ.get("LEASEHOLD_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "leasehold" / "config.json"


def config_dir() -> Path:
    """The directory of the config file: the attempts' state files live under it (`agent.workspace.state`)."""
    return config_path().absolute().parent


def write_private(path: Path, data: dict[str, Any]) -> None:
    """Write JSON readable by the owner only: a 0700 directory if created, a 0600 file, atomically."""
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        directory.chmod(0o700)  # mkdir's mode is filtered by the umask
    descriptor, temporary = _create_temporary(directory, path.name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _create_temporary(directory: Path, name: str) -> tuple[int, Path]:
    """A fresh file `.<name>.<random>.tmp` in `directory`, created with mode 0600, as `tempfile.mkstemp` makes
    it (a new name per writer, threads too; `O_EXCL`), without importing `tempfile` (and `shutil`, `random`)."""
    for _ in range(TEMPORARY_NAME_TRIES):
        temporary = directory / f".{name}.{os.urandom(8).hex()}.tmp"
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            return os.open(temporary, flags, 0o600), temporary
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name in {directory}")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise NotLoggedIn(f"{path} cannot be read: {exc}") from None
    return data if isinstance(data, dict) else None


def save_settings(settings: Settings) -> Path:
    path = config_path()
    data: dict[str, Any] = {"url": settings.url, "token": settings.token}
    if settings.project:
        data["project"] = settings.project
    write_private(path, data)
    return path


def load_settings() -> Settings:
    """The config file with the environment's overrides; `NotLoggedIn` when URL or token is missing.

    With `LEASEHOLD_ATTEMPT_TOKEN` set, that token and no other: neither
    `LEASEHOLD_TOKEN` nor the config file's token is used.
    """
    stored = _read(config_path()) or {}
    attempt_token = os.environ.get("LEASEHOLD_ATTEMPT_TOKEN")
    if attempt_token:
        return _command_settings(attempt_token, stored)
    url = os.environ.get("LEASEHOLD_URL") or stored.get("url")
    token = os.environ.get("LEASEHOLD_TOKEN") or stored.get("token")
    project = os.environ.get("LEASEHOLD_PROJECT") or stored.get("project")
    if not url or not token:
        raise NotLoggedIn(f"Not logged in: run `leasehold login URL` (config file {config_path()}).")
    return Settings(url=str(url), token=str(token), project=str(project) if project else None)


def _command_settings(attempt_token: str, stored: dict[str, Any]) -> Settings:
    url = os.environ.get("LEASEHOLD_URL") or stored.get("url")
    project = os.environ.get("LEASEHOLD_PROJECT") or stored.get("project")
    attempt_id, task, epoch = (os.environ.get(name, "") for name in _COMMAND_VARIABLES)
    if not url or not attempt_id.isdigit() or not task or not epoch.isdigit():
        raise NotLoggedIn(
            "LEASEHOLD_ATTEMPT_TOKEN is set, but not "
            + ", ".join(("LEASEHOLD_URL", *_COMMAND_VARIABLES))
            + " as `leasehold run` sets them for its command."
        )
    attempt = CommandAttempt(
        attempt_id=int(attempt_id), task=task, epoch=int(epoch), label=os.environ.get("LEASEHOLD_LABEL", "")
    )
    return Settings(url=str(url), token=attempt_token, project=str(project) if project else None, attempt=attempt)


_COMMAND_VARIABLES = ("LEASEHOLD_ATTEMPT_ID", "LEASEHOLD_TASK", "LEASEHOLD_EPOCH")
