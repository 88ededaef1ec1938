from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from landing.services import tasks_landed_outside
from reconciliation.landed import LandedOutside
from reconciliation.services import reconcile


class Command(BaseCommand):
    help = (
        "Compare the lease records with git and the environment table and record findings "
        "(the job the scheduler runs every 5 minutes). Ended attempts are read only where something changed "
        "since the last run; --full reads every one of the last 30 days again. "
        "With --prune-worktrees, also remove orphan worktrees reported as removable: "
        "merged, landed or discarded, and clean. Nothing else is ever removed. "
        "Delivered tasks whose head is already in their target branch are marked landed first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--prune-worktrees",
            action="store_true",
            help="remove removable orphan worktrees with `git worktree remove` (never --force)",
        )
        parser.add_argument(
            "--full",
            action="store_true",
            help="re-read every ended attempt of the last 30 days, not only what changed since the last run",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        landed: list[str] = []

        def land(found: LandedOutside) -> None:
            landed.extend(task.key for task in tasks_landed_outside(landed=found))

        run = reconcile(prune_worktrees=options["prune_worktrees"], land_outside=land, full=options["full"])
        self.stdout.write(
            f"Reconciliation run {run.pk}{' (full)' if run.full else ''}: {run.status}; "
            f"{run.opened} finding(s) opened, {run.resolved} resolved."
        )
        width = max(len(condition) for condition in run.counts)
        for condition, count in run.counts.items():
            self.stdout.write(f"  {condition:<{width}}  {count}")
        for key in landed:
            self.stdout.write(f"Landed {key}: its delivered head is in the target branch")
        for path in run.pruned:
            self.stdout.write(f"Pruned worktree {path}")
        for error in run.errors:
            where = error.get("project") or "run"
            self.stderr.write(f"Error ({where}): {error.get('message')}")
        if run.errors:
            self.stderr.write(f"{len(run.errors)} error(s); the other projects were reconciled.")
