"""The per-worktree commit hooks that add an attempt's trailer (SPEC §15.1, §5).

`install_label_hook(worktree, label)` points that worktree alone at a hooks
directory of its own (`extensions.worktreeConfig` + `git config --worktree
core.hooksPath`), inside the worktree's git directory, so the main checkout
and other worktrees keep their hooks. There:

- `prepare-commit-msg` adds `Leasehold-Label: <label>` with `git
  interpret-trailers --if-exists addIfDifferent`: once, never duplicated
  (an amend keeps one), not on merges (source `merge` or a `MERGE_HEAD`), and
  not to an empty message (git must still abort a commit whose message is
  empty);
- `commit-msg` does the same after the editor closed, for commits whose
  message was written there (prepare-commit-msg ran on an empty one);
- every other hook the repository had (its `core.hooksPath`, else
  `hooks/` of the common git directory) is chained, so installing the
  trailer hook turns none of the project's hooks off.

A takeover (another attempt working in the same worktree) installs again
with the new label. Nothing here removes or resets anything.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

from agent.workspace.labels import git_trailer

HOOKS_DIR_NAME = "leasehold-hooks"
TRAILER_HOOKS = ("prepare-commit-msg", "commit-msg")

_TRAILER_HOOK = """#!/bin/sh
# Installed by leasehold for this worktree only: adds the attempt's trailer once, never on merges.
trailer={trailer}
original={original}
message_file="$1"
add_trailer=yes
case "${{2-}}" in merge) add_trailer=no ;; esac
if git rev-parse -q --verify MERGE_HEAD >/dev/null 2>&1; then add_trailer=no; fi
if [ "$add_trailer" = yes ] && grep -v '^#' "$message_file" | grep -q '[^[:space:]]'; then
    git interpret-trailers --in-place --if-exists addIfDifferent --trailer "$trailer" "$message_file" || exit 1
fi
if [ -x "$original/{name}" ]; then
    exec "$original/{name}" "$@"
fi
exit 0
"""

_CHAINED_HOOK = """#!/bin/sh
# Installed by leasehold: this worktree's hooks live elsewhere; the repository's own hook still runs.
exec {target} "$@"
"""


def _git(worktree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(worktree), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )


def _out(worktree: Path, *args: str) -> str:
    done = _git(worktree, *args)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["failed"])[0]
        raise OSError(f"git {' '.join(args)}: {first}")
    return done.stdout.strip()


def _write_executable(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o755)
    os.replace(temporary, path)


def _repository_hooks(worktree: Path) -> Path | None:
    """The hooks directory the repository sets (`core.hooksPath` of any scope but this worktree's own)."""
    listed = _git(worktree, "config", "--show-scope", "--get-all", "core.hooksPath").stdout.splitlines()
    values = [line.split("\t", 1)[1] for line in listed if "\t" in line and not line.startswith("worktree\t")]
    if not values:
        return None
    chosen = Path(values[-1]).expanduser()
    return chosen if chosen.is_absolute() else Path(worktree) / chosen


def install_label_hook(worktree: Path, label: str) -> Path:
    """Install (or refresh) the trailer hooks of `worktree` for `label`; the hooks directory.

    Raises OSError with a one-line message when git refuses.
    """
    git_dir = Path(_out(worktree, "rev-parse", "--absolute-git-dir"))
    common_dir = Path(_out(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    hooks_dir = git_dir / HOOKS_DIR_NAME
    original = _repository_hooks(worktree) or common_dir / "hooks"
    hooks_dir.mkdir(exist_ok=True)
    for name in TRAILER_HOOKS:
        text = _TRAILER_HOOK.format(
            trailer=shlex.quote(git_trailer(label)), original=shlex.quote(str(original)), name=name
        )
        _write_executable(hooks_dir / name, text)
    if original.is_dir():
        for hook in sorted(original.iterdir()):
            if hook.name in TRAILER_HOOKS or hook.suffix == ".sample" or not os.access(hook, os.X_OK):
                continue
            _write_executable(hooks_dir / hook.name, _CHAINED_HOOK.format(target=shlex.quote(str(hook))))
    enable_worktree_config(worktree)
    _out(worktree, "config", "--worktree", "core.hooksPath", str(hooks_dir))
    return hooks_dir


def enable_worktree_config(checkout: Path, *, tries: int = 20) -> None:
    """`extensions.worktreeConfig = true` in the repository's shared config, written only when it is not set yet.

    Several `run`s opening worktrees of one clone at once (a runner's slots) would otherwise race for
    `.git/config.lock`; a write that loses that race is tried again after a moment.
    """
    for attempt in range(tries):
        if _git(checkout, "config", "--get", "extensions.worktreeConfig").stdout.strip() == "true":
            return
        done = _git(checkout, "config", "extensions.worktreeConfig", "true")
        if done.returncode == 0:
            return
        if "lock" not in done.stderr or attempt == tries - 1:
            first = (done.stderr.strip().splitlines() or ["failed"])[0]
            raise OSError(f"git config extensions.worktreeConfig true: {first}")
        time.sleep(0.05 * (attempt + 1))
