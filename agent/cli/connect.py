"""`leasehold connect claude|codex|vscode|cursor` and `leasehold mcp --print-config` (SPEC §15.3).

`connect` writes the client's MCP configuration for `leasehold mcp` into the
file that client reads, merged with what is there (other servers and
settings are kept; a file that cannot be parsed is refused, never
overwritten):

| client | file | key |
| --- | --- | --- |
| Claude Code | `<project>/.mcp.json` | `mcpServers` |
| Codex | `$CODEX_HOME/config.toml` (`~/.codex`), `<worktree>/.codex/config.toml` | `[mcp_servers.leasehold]` |
| VS Code | `<project>/.vscode/mcp.json` | `servers` |
| Cursor | `<project>/.cursor/mcp.json` | `mcpServers` |

For Claude Code it also merges the hooks (`agent.cli.hooks`) into
`<project>/.claude/settings.json` and approves the project's `leasehold`
server there. The command and `LEASEHOLD_CONFIG` are absolute paths. The
login is checked first; without `--write` nothing is written, the files are
printed. `--worktree DIR` writes into DIR with a config file of its own (in
that worktree's git directory, 0600): each client instance there keeps its
own attempts, so instances never take each other's work.

What is written inside a checkout is listed in the repository's
`.git/info/exclude` (`agent.workspace.clientfiles`: the common git directory's,
so every worktree shares it) unless git tracks it: `connect` leaves nothing
for git to commit, and `leasehold run --worktree` copies these files from the
main checkout into each worktree it makes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_OK, Output
from agent.client.errors import LeaseholdError
from agent.workspace import clientfiles
from agent.workspace.config import NotLoggedIn, Settings, config_path, load_settings, write_private
from agent.workspace.session import UsageError, make_client
from agent.workspace.state import git_dir_of

CLIENTS = ("claude", "codex", "vscode", "cursor")
SERVER_NAME = "leasehold"
HOOKS = {"SessionStart": "session-start", "PreCompact": "pre-compact", "SessionEnd": "session-end"}
HOOK_TIMEOUT_SECONDS = 30


def absolute(path: Path) -> Path:
    """`path` absolute and normalised (`..` resolved textually; symlinks kept, as a venv's script is one)."""
    return Path(os.path.abspath(path))


def leasehold_command() -> list[str]:
    """`leasehold` as an absolute command: this script, the one beside this Python, on PATH, or `python -m agent`."""
    invoked = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if invoked is not None and invoked.name == "leasehold" and invoked.exists():
        return [str(absolute(invoked))]
    beside = Path(sys.executable).parent / "leasehold"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("leasehold")
    if found:
        return [str(absolute(Path(found)))]
    return [sys.executable, "-m", "agent"]


def _stored_login(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def login_warnings(path: Path) -> list[str]:
    """What makes a printed configuration fail to start: no config file, or a login the client will not have."""
    if not path.exists():
        return [
            f"{path} does not exist: run `leasehold login URL` first, or `leasehold mcp` exits before the handshake."
        ]
    stored = _stored_login(path)
    if not (stored.get("url") and stored.get("token")) and os.environ.get("LEASEHOLD_TOKEN"):
        return [
            f"the login is in this shell's environment only (LEASEHOLD_URL/LEASEHOLD_TOKEN), not in {path}: "
            "the MCP client will not have it; run `leasehold login URL` to store it."
        ]
    return []


def mcp_entry(client: str, *, config: Path, project: str | None, keep_on_exit: bool = False) -> dict[str, Any]:
    """The server entry: absolute command, `mcp` with its options, the absolute `LEASEHOLD_CONFIG`."""
    command, *prefix = leasehold_command()
    args = [*prefix, "mcp", *(["--project", project] if project else []), *(["--keep-on-exit"] if keep_on_exit else [])]
    entry: dict[str, Any] = {"command": command, "args": args, "env": {"LEASEHOLD_CONFIG": str(absolute(config))}}
    return {"type": "stdio", **entry} if client in ("claude", "vscode") else entry


def print_config(client: str, *, project: str | None = None) -> tuple[str, list[str]]:
    """The configuration snippet that makes `client` start `leasehold mcp`, and warnings about the login."""
    config = absolute(config_path())
    entry = mcp_entry(client, config=config, project=project)
    if client == "codex":
        text = _toml_merged("", entry)
    else:
        text = json.dumps({_servers_key(client): {SERVER_NAME: entry}}, indent=2)
    return text.rstrip("\n"), login_warnings(config)


def _servers_key(client: str) -> str:
    return "servers" if client == "vscode" else "mcpServers"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix or move it (nothing was written).") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} holds no JSON object; fix or move it (nothing was written).")
    return data


def _json_merged(path: Path, key: str, entry: dict[str, Any]) -> str:
    data = _read_json(path)
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise UsageError(f"{path}: {key!r} is not an object; fix it (nothing was written).")
    servers[SERVER_NAME] = entry
    return json.dumps(data, indent=2) + "\n"


def _toml_merged(text: str, entry: dict[str, Any]) -> str:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        document = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise UsageError(f"the TOML file cannot be parsed ({exc}); fix it (nothing was written).") from None
    servers = document.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        document["mcp_servers"] = servers
    table = tomlkit.table()
    table["command"] = entry["command"]
    table["args"] = entry["args"]
    environment = tomlkit.inline_table()
    environment.update(entry["env"])
    table["env"] = environment
    table.add(tomlkit.nl())  # a blank line before whatever table follows ours
    servers[SERVER_NAME] = table
    return tomlkit.dumps(document).rstrip("\n") + "\n"


def hook_command(event: str, *, config: Path) -> str:
    """The shell command of one hook: `LEASEHOLD_CONFIG=… /abs/leasehold hook <event>`."""
    return f"LEASEHOLD_CONFIG={shlex.quote(str(config))} {shlex.join(leasehold_command())} hook {event}"


def _is_ours(hook: Any) -> bool:
    command = str(hook.get("command", "")) if isinstance(hook, dict) else ""
    return any(command.endswith(f" hook {name}") for name in HOOKS.values()) and (
        "leasehold" in command or "-m agent" in command
    )


def _settings_merged(path: Path, *, config: Path, keep_on_exit: bool) -> str:
    """`.claude/settings.json` with our hooks (replacing earlier ones of ours) and the server approved."""
    data = _read_json(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError(f"{path}: 'hooks' is not an object; fix it (nothing was written).")
    for event, name in HOOKS.items():
        groups = [group for group in hooks.get(event, []) if isinstance(group, dict)]
        kept = []
        for group in groups:
            inner = group.get("hooks", [])
            mine = [hook for hook in inner if _is_ours(hook)]
            if mine and len(mine) == len(inner):
                continue  # a group holding only our earlier hook: replaced below
            kept.append({**group, "hooks": [hook for hook in inner if not _is_ours(hook)]} if mine else group)
        if event == "SessionEnd" and keep_on_exit:
            pass  # --keep-on-exit: the session's end hands nothing off
        else:
            command = hook_command(name, config=config)
            kept.append({"hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECONDS}]})
        if kept:
            hooks[event] = kept
        else:
            hooks.pop(event, None)
    approved = data.setdefault("enabledMcpjsonServers", [])
    if isinstance(approved, list) and SERVER_NAME not in approved:
        approved.append(SERVER_NAME)
    return json.dumps(data, indent=2) + "\n"


def _project_dir() -> Path:
    """The repository the current directory is in (its top level), else the current directory."""
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else Path.cwd()


def _checked_login(*, worktree: bool, token: str | None) -> Settings:
    """The login (with `token` instead, when given), checked against the server; `NotLoggedIn` (exit 6) if none."""
    settings = load_settings()
    if token:
        settings = Settings(url=settings.url, token=token, project=settings.project)
    path = absolute(config_path())
    stored = _stored_login(path)
    if not worktree and not (stored.get("url") and stored.get("token")):
        raise NotLoggedIn(
            f"The login is in this shell's environment only, not in {path}: the MCP client would not have it. "
            "Run `leasehold login URL` first (or use --worktree DIR, which writes a config file of its own)."
        )
    try:
        with make_client(settings) as client:
            client.projects(limit=1)
    except LeaseholdError as error:
        if error.code == "CONNECTION_FAILED":
            print(
                f"leasehold: warning: {settings.url} does not answer now; the login was not verified.", file=sys.stderr
            )
        else:
            raise
    return settings


def worktree_config_path(directory: Path) -> Path:
    """The config file of that worktree alone (its own attempts): in its git directory, else `DIR/.leasehold/`.

    In the git directory (`.git/worktrees/<name>/`) it is never committed, and
    it goes when the worktree is removed.
    """
    git_dir = git_dir_of(directory)
    return (git_dir / "leasehold" if git_dir is not None else directory / ".leasehold") / "config.json"


def _write_worktree_config(path: Path, settings: Settings, token: str | None, project: str | None) -> None:
    data = {"url": settings.url, "token": token or settings.token}
    if project or settings.project:
        data["project"] = project or settings.project or ""
    write_private(path, data)


def _write_text(path: Path, text: str) -> None:
    """Atomically, keeping an existing file's mode (these files hold paths, never a token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def cmd_connect(args: argparse.Namespace, out: Output) -> int:
    worktree = absolute(Path(args.worktree)) if args.worktree else None
    if worktree is not None and not worktree.is_dir():
        raise UsageError(f"{worktree} is not a directory.")
    if args.token and worktree is None:
        raise UsageError("--token names the agent of one worktree: use it with --worktree DIR.")
    settings = _checked_login(worktree=worktree is not None, token=args.token)
    project_dir = worktree or _project_dir()
    config = worktree_config_path(worktree) if worktree is not None else absolute(config_path())
    files: list[tuple[Path, str]] = []
    entry = mcp_entry(args.client, config=config, project=args.project, keep_on_exit=args.keep_on_exit)
    if args.client == "codex":
        home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
        path = (worktree / ".codex" if worktree is not None else home) / "config.toml"
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        try:
            files.append((path, _toml_merged(existing, entry)))
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}") from None
    else:
        relative = {"claude": ".mcp.json", "vscode": ".vscode/mcp.json", "cursor": ".cursor/mcp.json"}[args.client]
        path = project_dir / relative
        files.append((path, _json_merged(path, _servers_key(args.client), entry)))
    if args.client == "claude":
        path = project_dir / ".claude" / "settings.json"
        files.append((path, _settings_merged(path, config=config, keep_on_exit=args.keep_on_exit)))
    if args.write:
        if worktree is not None:
            _write_worktree_config(config, settings, args.token, args.project)
        for path, text in files:
            _write_text(path, text)
        excluded = clientfiles.exclude([path for path, _ in files])
    shown = [{"path": str(path), "content": text} for path, text in files]
    if args.write:
        human = "\n".join(f"Wrote {path}" for path, _ in files)
        if worktree is not None:
            human += f"\nWrote {config} (this worktree's own login and attempts, mode 0600)"
        if excluded:
            human += f"\nListed in the repository's .git/info/exclude (never committed): {', '.join(excluded)}"
    else:
        human = "\n\n".join(f"Would write {path}:\n{text.rstrip()}" for path, text in files)
        human += "\n\nNothing written: pass --write to write these files."
    out.result({"client": args.client, "written": bool(args.write), "config": str(config), "files": shown}, human)
    return EXIT_OK


def add_parser(command: Any) -> None:
    """`connect`, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    connect = command("connect", "Write an MCP client's configuration for `leasehold mcp` (merged).", cmd_connect)
    connect.add_argument("client", choices=CLIENTS, help="the MCP client")
    connect.add_argument("--write", action="store_true", help="write the files (default: print what would be written)")
    connect.add_argument("--worktree", metavar="DIR", help="configure the client in DIR with a login of its own")
    connect.add_argument("--token", help="with --worktree: another agent's token for DIR (default: this login's)")
    connect.add_argument("--project", help="default project of the MCP server")
    connect.add_argument(
        "--keep-on-exit", action="store_true", help="the server keeps its attempts when the session ends"
    )
