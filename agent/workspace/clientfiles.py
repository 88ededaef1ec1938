"""The MCP clients' files in a checkout (`leasehold connect`), kept out of git and carried into new worktrees.

`connect` writes machine-specific files (absolute paths) into the checkout:
`.mcp.json`, `.claude/settings.json`, `.vscode/mcp.json`, `.cursor/mcp.json`,
`.codex/config.toml`. None of them may be committed, so each one that git
does not track is listed in the repository's `info/exclude` — the common git
directory's, which every worktree of the repository reads — as a path
anchored at a worktree's top (`/.mcp.json`). An ignored file makes no worktree
dirty, and `git worktree remove` (so `workspace prune`) does not refuse it.

`carry_into(main, worktree)` copies the ones the main checkout has (and git
does not track) into a worktree `leasehold run --worktree` made, so the
client started there has its MCP server and hooks too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from agent.workspace.git import git

CLIENT_FILES = (".mcp.json", ".claude/settings.json", ".vscode/mcp.json", ".cursor/mcp.json", ".codex/config.toml")
EXCLUDE_HEADER = "# leasehold connect: machine-specific MCP client files"


def _top_and_common(directory: Path) -> tuple[Path, Path] | None:
    done = git(directory, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir", check=False)
    lines = done.stdout.split("\n") if done.returncode == 0 else []
    if len(lines) < 2 or not lines[0].strip() or not lines[1].strip():
        return None
    return Path(lines[0].strip()), Path(lines[1].strip())


def _tracked(top: Path, relative: str) -> bool:
    return git(top, "ls-files", "--error-unmatch", "--", relative, check=False).returncode == 0


def exclude(paths: list[Path]) -> list[str]:
    """List each of `paths` that is in a git checkout and untracked in its repository's `info/exclude`.

    Returns the patterns listed there now, new or not (none for a path that is
    tracked or outside any checkout). Nothing else in the file changes.
    """
    added: list[str] = []
    for path in paths:
        found = _top_and_common(path.parent if path.parent.is_dir() else Path.cwd())
        if found is None:
            continue
        top, common = found
        try:
            relative = path.resolve().relative_to(top.resolve()).as_posix()
        except ValueError:
            continue  # outside this checkout (e.g. ~/.codex/config.toml)
        if _tracked(top, relative):
            continue  # git tracks it: listing it would change nothing
        pattern = f"/{relative}"
        exclude_file = common / "info" / "exclude"
        existing = exclude_file.read_text(encoding="utf-8") if exclude_file.exists() else ""
        if pattern in existing.splitlines():
            added.append(pattern)
            continue
        lines = [] if EXCLUDE_HEADER in existing.splitlines() else [EXCLUDE_HEADER]
        text = existing if not existing or existing.endswith("\n") else existing + "\n"
        exclude_file.parent.mkdir(parents=True, exist_ok=True)
        exclude_file.write_text(text + "".join(f"{line}\n" for line in [*lines, pattern]), encoding="utf-8")
        added.append(pattern)
    return added


def carry_into(main: Path, worktree: Path) -> list[Path]:
    """Copy the client files the main checkout has (untracked) into `worktree` where it has none; the copies."""
    copied: list[Path] = []
    if main.resolve() == worktree.resolve():
        return copied
    for relative in CLIENT_FILES:
        source, target = main / relative, worktree / relative
        if not source.is_file() or target.exists() or _tracked(main, relative):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        copied.append(target)
    exclude(copied)
    return copied
