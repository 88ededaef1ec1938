"""Where the CLI keeps its secrets: the config file (server URL, agent token) and the state file
(the current attempt's id, lease token and epoch).

- Config: `$LEASEHOLD_CONFIG`, default `~/.config/leasehold/config.json`
  (`$XDG_CONFIG_HOME` honoured). `LEASEHOLD_URL`, `LEASEHOLD_TOKEN` and
  `LEASEHOLD_PROJECT` override what it says.
- State: `$LEASEHOLD_STATE`, default `attempt.json` beside the config file.
  The lease token lives only there (and in the memory of the process holding
  the lease); it is never printed. `leasehold run` exports `LEASEHOLD_STATE`
  to its command, so `leasehold note` inside that command acts on the same
  attempt. A lost lease is marked `"lost": true` there and no command sends
  that token again.

Both files are written atomically with mode 0600; a directory the toolkit
creates for them gets 0700.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.client import Lease


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    project: str | None = None


class NotLoggedIn(Exception):
    pass


def config_path() -> Path:
    explicit = os.environ.get("LEASEHOLD_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "leasehold" / "config.json"


def state_path() -> Path:
    explicit = os.environ.get("LEASEHOLD_STATE")
    if explicit:
        return Path(explicit).expanduser()
    return config_path().with_name("attempt.json")


def write_private(path: Path, data: dict[str, Any]) -> None:
    """Write JSON readable by the owner only: a 0700 directory if created, a 0600 file, atomically."""
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        directory.chmod(0o700)  # mkdir's mode is filtered by the umask
    # mkstemp: a fresh name per writer (threads too), created with mode 0600.
    descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    temporary = Path(name)
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
    """The config file with the environment's overrides; `NotLoggedIn` when URL or token is missing."""
    stored = _read(config_path()) or {}
    url = os.environ.get("LEASEHOLD_URL") or stored.get("url")
    token = os.environ.get("LEASEHOLD_TOKEN") or stored.get("token")
    project = os.environ.get("LEASEHOLD_PROJECT") or stored.get("project")
    if not url or not token:
        raise NotLoggedIn(f"Not logged in: run `leasehold login URL` (config file {config_path()}).")
    return Settings(url=str(url), token=str(token), project=str(project) if project else None)


@dataclass(frozen=True)
class AttemptState:
    lease: Lease
    lost: bool = False
    lost_reason: str | None = None


def save_state(lease: Lease, *, lost: bool = False, lost_reason: str | None = None) -> Path:
    path = state_path()
    write_private(path, {**lease.as_dict(), "lost": lost, "lost_reason": lost_reason})
    return path


def load_state() -> AttemptState | None:
    data = _read(state_path())
    if not data or "token" not in data:
        return None
    return AttemptState(lease=Lease.from_dict(data), lost=bool(data.get("lost")), lost_reason=data.get("lost_reason"))


def clear_state(lease: Lease | None = None) -> None:
    """Forget the current attempt (only if it is still `lease`'s, when given)."""
    path = state_path()
    if lease is not None:
        current = load_state()
        if current is None or current.lease.attempt_id != lease.attempt_id:
            return
    path.unlink(missing_ok=True)
