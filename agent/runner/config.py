"""`runner.toml` (SPEC §23.1): what a runner serves and how, read with `tomllib` and checked before anything starts.

```toml
server = "http://ledger.internal:8000"        # required: the Leasehold server
token_file = "/etc/leasehold/runner.token"    # required: the runner token (lhr_…), not world-readable
state_dir = "/var/lib/leasehold-runner"       # default: $XDG_STATE_HOME/leasehold-runner/<runner name>
drain_grace_seconds = 600                     # default 600: what running commands get after SIGTERM
wait_seconds = 60                             # default 60 (1-60): one server-side claim wait (SPEC §25)

[projects.web]                                # one table per project slug the runner serves
repository = "/srv/clones/web"                # required: the git clone where worktrees are made
command = ["claude", "-p", "Work on {task}; read {context_file}"]   # required: argv, never a shell string
commands = { docs = ["codex", "exec", "…"] }  # optional: argv per task class
landing_slots = 0                             # default 0: slots of this runner that land this project (§21.2)
lease_seconds = 600                           # optional: the lease asked for at each claim
environment_kind = "database"                 # optional: each claim allocates an environment of this kind (§23.3)

[providers.preview-db]                        # optional: an environment kind's provider (§23.3)
provision = "/srv/leasehold/make-db"          # a command: a string (split like a shell would) or argv
teardown = "/srv/leasehold/drop-db"
```

Placeholders in command arguments: `{task}`, `{context_file}`, `{branch}`, `{worktree}` (`leasehold run`
replaces them); any other `{name}` is refused as a likely typo. A key the runner does not know is an error
that names the key and its table; so is a value of the wrong type.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.runner.providers import ProviderConfigError, ProviderSpec, provider_specs

PLACEHOLDERS = ("task", "context_file", "branch", "worktree")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")
DEFAULT_DRAIN_GRACE_SECONDS = 600
DEFAULT_WAIT_SECONDS = 60
MAX_WAIT_SECONDS = 60

TOP_KEYS = {"server", "token_file", "state_dir", "drain_grace_seconds", "wait_seconds", "projects", "providers"}
PROJECT_KEYS = {"repository", "command", "commands", "landing_slots", "lease_seconds", "environment_kind"}


class ConfigError(Exception):
    """The runner's config cannot be used; the message names the file, the table and the key."""


@dataclass(frozen=True)
class ProjectConfig:
    slug: str
    repository: Path
    command: list[str]
    commands: dict[str, list[str]] = field(default_factory=dict)
    landing_slots: int = 0
    lease_seconds: int | None = None
    environment_kind: str | None = None

    def command_for(self, task_class: str | None) -> list[str]:
        """The command template of a task class (`commands`), else `command`."""
        return list(self.commands.get(task_class or "", self.command))


@dataclass(frozen=True)
class RunnerConfig:
    path: Path
    server: str
    token_file: Path
    projects: dict[str, ProjectConfig]
    providers: dict[str, ProviderSpec] = field(default_factory=dict)
    state_dir: Path | None = None
    drain_grace_seconds: float = DEFAULT_DRAIN_GRACE_SECONDS
    wait_seconds: int = DEFAULT_WAIT_SECONDS

    @property
    def landing_slots(self) -> int:
        return sum(project.landing_slots for project in self.projects.values())

    def state_dir_for(self, runner_name: str) -> Path:
        """`state_dir`, else `$XDG_STATE_HOME/leasehold-runner/<name>` (`~/.local/state/…`)."""
        if self.state_dir is not None:
            return self.state_dir
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "leasehold-runner" / runner_name


def default_config_path() -> Path:
    """`$LEASEHOLD_RUNNER_CONFIG`, else `runner.toml` in the current directory."""
    return Path(os.environ.get("LEASEHOLD_RUNNER_CONFIG") or "runner.toml")


def load_config(path: Path) -> RunnerConfig:
    """Read and check `path`; `ConfigError` says what is wrong and where."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (give the runner's config with --config PATH)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, path=Path(path).absolute())


def parse_config(data: dict[str, Any], *, path: Path) -> RunnerConfig:
    check = _Checker(path)
    check.known(data, TOP_KEYS, "the top level")
    server = check.string(data, "server", "the top level", required=True)
    if not server.startswith(("http://", "https://")):
        raise check.error("the top level", "server", f"must be an http:// or https:// URL, not {server!r}")
    token_file = check.path(data, "token_file", "the top level", required=True)
    state_dir = check.path(data, "state_dir", "the top level")
    grace = check.number(data, "drain_grace_seconds", "the top level", DEFAULT_DRAIN_GRACE_SECONDS, low=0)
    wait = int(check.number(data, "wait_seconds", "the top level", DEFAULT_WAIT_SECONDS, low=1, integer=True))
    if wait > MAX_WAIT_SECONDS:
        raise check.error("the top level", "wait_seconds", f"must be at most {MAX_WAIT_SECONDS} (one server-side wait)")
    projects_table = check.table(data, "projects", "the top level")
    if not projects_table:
        raise check.error("the top level", "projects", "name at least one project: a [projects.SLUG] table")
    projects = {slug: _project(check, slug, table) for slug, table in projects_table.items()}
    providers = _providers(check, data)
    return RunnerConfig(
        path=path,
        server=server.rstrip("/"),
        token_file=token_file or Path(),
        projects=projects,
        providers=providers,
        state_dir=state_dir,
        drain_grace_seconds=float(grace),
        wait_seconds=wait,
    )


def _project(check: _Checker, slug: str, table: Any) -> ProjectConfig:
    where = f"[projects.{slug}]"
    if not _SLUG.fullmatch(slug):
        raise check.error("[projects]", slug, "is not a project slug (letters, digits, '-' and '_')")
    if not isinstance(table, dict):
        raise check.error("[projects]", slug, "must be a table: [projects.SLUG] with repository and command")
    check.known(table, PROJECT_KEYS, where)
    repository = check.path(table, "repository", where, required=True) or Path()
    if not repository.is_dir():
        raise check.error(where, "repository", f"{str(repository)!r} is not a directory")
    if not (repository / ".git").exists():
        raise check.error(where, "repository", f"{str(repository)!r} is not a git clone (no .git in it)")
    command = check.command(table.get("command"), where, "command", required=True)
    commands_table = table.get("commands", {})
    if not isinstance(commands_table, dict):
        raise check.error(where, "commands", "must be a table of task class = [argv…]")
    commands = {
        str(name): check.command(value, where, f"commands.{name}", required=True)
        for name, value in commands_table.items()
    }
    landing = int(check.number(table, "landing_slots", where, 0, low=0, integer=True))
    lease = table.get("lease_seconds")
    if lease is not None:
        lease = int(check.number(table, "lease_seconds", where, 0, low=1, integer=True))
    environment_kind = check.string(table, "environment_kind", where) or None
    return ProjectConfig(
        slug=slug,
        repository=repository.resolve(),
        command=command,
        commands=commands,
        landing_slots=landing,
        lease_seconds=lease,
        environment_kind=environment_kind,
    )


def _providers(check: _Checker, data: dict[str, Any]) -> dict[str, ProviderSpec]:
    """`[providers.KIND]` tables, read by the providers' own parser (`agent.runner.providers.provider_specs`)."""
    tables = check.table(data, "providers", "the top level")
    try:
        return provider_specs(tables)
    except ProviderConfigError as error:
        raise ConfigError(f"{check.file}: {error}") from None


class _Checker:
    """Typed reads of the TOML document, each failure naming the file, the table and the key."""

    def __init__(self, path: Path) -> None:
        self.file = path

    def error(self, where: str, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.file}: {where}: {key!r} {problem}")

    def known(self, table: dict[str, Any], keys: set[str], where: str) -> None:
        for key in table:
            if key not in keys:
                raise self.error(where, key, f"is not a key the runner knows (known: {', '.join(sorted(keys))})")

    def string(self, table: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
        value = table.get(key)
        if value is None:
            if required:
                raise self.error(where, key, "is required")
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.error(where, key, f"must be a non-empty string, not {value!r}")
        return value

    def path(self, table: dict[str, Any], key: str, where: str, *, required: bool = False) -> Path | None:
        value = self.string(table, key, where, required=required)
        if not value:
            return None
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.file.parent / path)

    def number(
        self, table: dict[str, Any], key: str, where: str, default: float, *, low: float, integer: bool = False
    ) -> float:
        value = table.get(key, default)
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise self.error(where, key, f"must be {'an integer' if integer else 'a number'}, not {value!r}")
        if value < low:
            raise self.error(where, key, f"must be at least {low:g}, not {value!r}")
        return float(value)

    def table(self, data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(where, key, "must be a table")
        return value

    def command(self, value: Any, where: str, key: str, *, required: bool, split: bool = False) -> list[str]:
        if value is None:
            if required:
                raise self.error(where, key, "is required (a list of arguments)")
            return []
        if split and isinstance(value, str):
            value = shlex.split(value)
        if not isinstance(value, list) or not value or not all(isinstance(arg, str) for arg in value):
            raise self.error(where, key, f"must be a non-empty list of strings (the argv), not {value!r}")
        if not value[0].strip():
            raise self.error(where, key, "names no program (its first argument is empty)")
        for argument in value:
            for name in _PLACEHOLDER.findall(argument):
                if name not in PLACEHOLDERS:
                    allowed = ", ".join("{" + known + "}" for known in PLACEHOLDERS)
                    raise self.error(where, key, f"has the unknown placeholder {{{name}}} (allowed: {allowed})")
        return list(value)
