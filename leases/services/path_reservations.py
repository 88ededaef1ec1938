"""Path reservations (SPEC §19): a claim may reserve repository paths for as long as its lease lives.

Race-freedom: a claim that carries paths first locks its project's
`ReservationLock` row (created on first use), then — in a statement of its
own, so it sees every claim that committed before the lock was ours — reads
the project's live reservations, refuses an overlap with PATHS_RESERVED, and
inserts its own in the same transaction. Claims with paths in one project
take turns on that row; claims without paths never touch it and keep their
fast path. A reservation ends with its lease (finish, release, revoke,
expiry, or a lapse nobody has noticed yet): it is live exactly while its
attempt is active and unexpired, so nothing has to clean it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.errors import PathsReserved
from leases.models import Attempt, PathReservation, ReservationLock
from leases.selectors import live_reservations
from ledger.models import PathsMode, Project, Task
from ledger.paths import overlapping


@dataclass(frozen=True)
class PathsClaim:
    """The paths a claim reserves and how."""

    paths: tuple[str, ...]
    mode: str


def claimed_paths(task: Task, *, paths: tuple[str, ...] | None, mode: str | None) -> PathsClaim | None:
    """The claim's own paths, else the task's; the claim's mode, else the task's (exclusive by default)."""
    chosen = paths if paths is not None else tuple(task.paths or ())
    if not chosen:
        return None
    if mode is None:
        mode = task.paths_mode if paths is None else PathsMode.EXCLUSIVE
    return PathsClaim(paths=chosen, mode=mode)


def _lock_project_reservations(project: Project) -> None:
    locks = ReservationLock.objects.select_for_update(no_key=True).filter(project=project)
    if locks.first() is None:
        ReservationLock.objects.bulk_create([ReservationLock(project=project)], ignore_conflicts=True)
        locks.first()


def refuse_overlap(claim: PathsClaim, *, task: Task, now: datetime) -> None:
    """PATHS_RESERVED when `claim` overlaps a live reservation of another attempt in the project (unless both shared).

    Takes the project's reservation lock, which the transaction keeps until it ends.
    """
    _lock_project_reservations(task.project)
    held = live_reservations(project=task.project, now=now).values_list(
        "attempt_id", "attempt__task__key", "attempt__agent__handle", "paths", "mode"
    )
    for attempt_id, task_key, holder, paths, mode in held:
        if claim.mode == PathsMode.SHARED and mode == PathsMode.SHARED:
            continue
        mine, theirs = overlapping(claim.paths, paths)
        if mine:
            raise PathsReserved(
                f"{task_key} ({holder}) holds {mode} paths that overlap yours: {', '.join(theirs[:5])}.",
                details={
                    "task": task_key,
                    "attempt": attempt_id,
                    "holder": holder,
                    "mode": mode,
                    "paths": theirs,
                    "requested": mine,
                },
            )


def reserve(claim: PathsClaim, *, attempt: Attempt, now: datetime) -> PathReservation:
    return PathReservation.objects.create(
        attempt=attempt, project_id=attempt.task.project_id, paths=list(claim.paths), mode=claim.mode, created_at=now
    )


def reservation_of(attempt: Attempt) -> PathsClaim | None:
    """The paths `attempt` reserved, if any (live while its lease is)."""
    row = PathReservation.objects.filter(attempt=attempt).values_list("paths", "mode").first()
    return None if row is None else PathsClaim(paths=tuple(row[0]), mode=row[1])
