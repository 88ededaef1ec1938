"""Reconciliation (SPEC §7): compare the lease records with git and the environment table.

Findings record each mismatch; a run records each pass. Nothing here ever
deletes a branch or an environment; the only thing it may remove, and only
when asked, is a clean git worktree whose work is merged or was discarded.
"""
