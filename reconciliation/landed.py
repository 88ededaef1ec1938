"""Landed outside the queue (SPEC §21.2): which delivered tasks' heads are already in their target.

How `land_method=none` projects (merges through a forge's pull requests) reach `done`, and how a
task merged by hand while it waited in the queue leaves it. This module only answers with git, with
no transaction open; the door that runs reconciliation hands the answer to the landing room
(`landing.services.tasks_landed_outside`), which re-checks each task under its lock.

The target's tip is read where a lander pushes: on the project's `remote` when it has one
(`git ls-remote`), else in its `repository`. Ancestry needs the objects, so a remote target whose
tip the local repository lacks is fetched first, into a private ref (`refs/leasehold/targets/…`,
never a branch or a remote-tracking ref an agent uses). Without a local repository git can only
tell a head that *is* the tip (a fast-forward).

The check follows what changed (SPEC §25): the delivered queue is live work, but a fleet's can
hold tens of thousands of tasks, and reading all of it every run made reconcile 3 to 9 times slower at
a million tasks than at 10,000. A project's `TargetCursor` holds the tip the last run read; a run
re-reads only the tasks delivered since then, the tasks whose head is among the commits the
target gained since that tip (`git rev-list old..new`), and the ones found in the target last time
that stayed delivered. Every delivered task is read on a project's first run, after its target
branch changed, when the tip was rewritten (not a fast-forward) or gained more than
`NEW_COMMITS_MAX` commits, and on `reconcile --full`. What a run with a cursor cannot see: a task
moved into the project already delivered at a head the target had (`--full` reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q

from ledger.models import Project, Task, TaskStatus
from reconciliation.git import (
    PRIVATE_REFS_PREFIX,
    SAFE_BRANCH,
    GitError,
    LocalRepository,
    is_commit,
    is_url,
    remote_heads,
)
from reconciliation.models import TargetCursor

TARGET_REFS_PREFIX = PRIVATE_REFS_PREFIX + "targets/"

# {task id: (its delivered head, the target's tip that contains it)}: what `tasks_landed_outside` takes.
LandedOutside = dict[int, tuple[str, str]]


# A delivery commits a moment after it reads the clock: a task delivered this long before a run's
# clock reading may commit after that run read the queue, so the next run reads it again.
DELIVERY_SLACK = timedelta(minutes=15)
# More new commits on the target than this since the last run: every delivered task is read instead.
NEW_COMMITS_MAX = 500


@dataclass(frozen=True)
class DeliveredTask:
    task_id: int
    task_key: str
    head: str


@dataclass(frozen=True)
class LandingProject:
    id: int
    slug: str
    repository: str
    remote: str
    target_branch: str


@dataclass
class TargetCheck:
    """One run's answer: the heads found in their targets, the targets git could not read, and the tips read."""

    landed: LandedOutside = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    # {project id: (its target branch, the tip read, the ids of the tasks found in it)}
    tips: dict[int, tuple[str, str, list[int]]] = field(default_factory=dict)


def landing_projects() -> list[LandingProject]:
    """Every unarchived project with landing on that has delivered work: one short query."""
    delivered = Task.objects.filter(project=OuterRef("pk"), status=TaskStatus.DELIVERED)
    rows = (
        Project.objects.filter(Exists(delivered), archived_at__isnull=True)
        .exclude(target_branch="")
        .order_by("id")
        .values_list("id", "slug", "repository", "remote", "target_branch")
    )
    return [
        LandingProject(id=pk, slug=slug, repository=repository.strip(), remote=remote.strip(), target_branch=target)
        for pk, slug, repository, remote, target in rows
    ]


def _delivered(project_id: int, only: Q | None = None) -> list[DeliveredTask]:
    rows = Task.objects.filter(project_id=project_id, status=TaskStatus.DELIVERED)
    if only is not None:
        rows = rows.filter(only)
    return [
        DeliveredTask(pk, key, head)
        for pk, key, head in rows.order_by("id").values_list("id", "key", "delivered_commit")
        if is_commit(head)
    ]


def _local(repository: str) -> LocalRepository | None:
    return LocalRepository(repository) if repository and not is_url(repository) else None


def target_tip(project: LandingProject) -> tuple[str, LocalRepository | None]:
    """The target's tip where a lander pushes, and the local repository that holds its history (if any)."""
    target = project.target_branch
    if not SAFE_BRANCH.match(target):
        raise GitError(f"target branch {target[:100]!r} is not a branch name git would read as one")
    local = _local(project.repository)
    source = project.remote or project.repository
    heads = local.heads() if local is not None and not project.remote else remote_heads(source)
    tip = heads.get(target)
    if tip is None:
        raise GitError(f"target branch {target!r} not found in {source}")
    if local is not None and project.remote and not local.has_commit(tip):
        tip = local.fetch_branch(project.remote, target, into=TARGET_REFS_PREFIX + target)
    return tip, local


def delivered_to_check(
    project: LandingProject, cursor: TargetCursor | None, tip: str, local: LocalRepository | None
) -> list[DeliveredTask]:
    """The delivered tasks whose answer can differ from the last run's: all of them without a usable cursor."""
    if cursor is None or cursor.target_branch != project.target_branch:
        return _delivered(project.id)
    changed = Q(delivered_at__gte=cursor.checked_at - DELIVERY_SLACK) | Q(pk__in=cursor.pending or [])
    if tip != cursor.tip:
        if local is None:
            changed |= Q(delivered_commit=tip)  # without history only the tip itself is known to be in it
        else:
            gained = local.commits_between(cursor.tip, tip, limit=NEW_COMMITS_MAX)
            if gained is None:
                return _delivered(project.id)
            changed |= Q(delivered_commit__in=sorted(gained))
    return _delivered(project.id, changed)


def heads_in_target(project: LandingProject, cursor: TargetCursor | None = None) -> tuple[str, LandedOutside]:
    """The target's tip, and the project's delivered tasks (those that changed since `cursor`) whose head is in it."""
    tip, local = target_tip(project)
    changed = delivered_to_check(project, cursor, tip, local)
    # Heads this repository does not hold cannot be in its target: one git call sets them aside.
    known = local.known_commits([task.head for task in changed]) if local is not None and changed else set()
    landed = {
        task.task_id: (task.head, tip)
        for task in changed
        if task.head == tip or (task.head in known and local is not None and local.contains(task.head, tip))
    }
    return tip, landed


def landed_outside(projects: list[LandingProject], *, full: bool = False) -> TargetCheck:
    """Every delivered head already in its target (read since each project's cursor unless `full`), and one error
    per project whose target git could not read."""
    check = TargetCheck()
    cursors = {} if full else TargetCursor.objects.in_bulk([project.id for project in projects])
    for project in projects:
        try:
            tip, landed = heads_in_target(project, cursors.get(project.id))
        except GitError as exc:
            check.errors.append(
                {
                    "project": project.slug,
                    "repository": project.remote or project.repository,
                    "message": f"landing target {project.target_branch}: {exc}",
                }
            )
            continue
        check.landed.update(landed)
        check.tips[project.id] = (project.target_branch, tip, sorted(landed))
    return check


def save_target_cursors(check: TargetCheck, *, now: datetime) -> None:
    """Record each target read, with the tasks found in it that are still delivered (the landing room left them)."""
    found = sorted(task_id for _, _, ids in check.tips.values() for task_id in ids)
    still: set[int] = set()
    for start in range(0, len(found), 500):
        chunk = found[start : start + 500]
        still.update(Task.objects.filter(pk__in=chunk, status=TaskStatus.DELIVERED).values_list("pk", flat=True))
    for project_id, (target, tip, ids) in check.tips.items():
        TargetCursor.objects.update_or_create(
            project_id=project_id,
            defaults={
                "target_branch": target,
                "tip": tip,
                "checked_at": now,
                "pending": [task_id for task_id in ids if task_id in still],
            },
        )
