"""The git side's one failure, apart from the git code that raises it: the CLI maps it to exit 8 without importing
git's module (`agent.workspace.git`, which re-exports it), so a call that never runs git pays nothing for it."""

from __future__ import annotations


class WorkspaceError(Exception):
    """git cannot give this attempt a workspace as asked; the message is one line (exit 8)."""
