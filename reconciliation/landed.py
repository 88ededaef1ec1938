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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledger.models import Task, TaskStatus
from reconciliation.git import (
    PRIVATE_REFS_PREFIX,
    SAFE_BRANCH,
    GitError,
    LocalRepository,
    is_commit,
    is_url,
    remote_heads,
)

TARGET_REFS_PREFIX = PRIVATE_REFS_PREFIX + "targets/"

# {task id: (its delivered head, the target's tip that contains it)}: what `tasks_landed_outside` takes.
LandedOutside = dict[int, tuple[str, str]]


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
    delivered: tuple[DeliveredTask, ...]


def delivered_by_project() -> list[LandingProject]:
    """The delivered tasks of every unarchived project with landing on, by project: one short query."""
    rows = (
        Task.objects.filter(status=TaskStatus.DELIVERED, project__archived_at__isnull=True)
        .exclude(project__target_branch="")
        .order_by("project_id", "id")
        .values(
            "id",
            "key",
            "delivered_commit",
            "project_id",
            "project__slug",
            "project__repository",
            "project__remote",
            "project__target_branch",
        )
    )
    projects: dict[int, dict[str, Any]] = {}
    for row in rows:
        project = projects.setdefault(
            row["project_id"],
            {
                "id": row["project_id"],
                "slug": row["project__slug"],
                "repository": row["project__repository"].strip(),
                "remote": row["project__remote"].strip(),
                "target_branch": row["project__target_branch"],
                "delivered": [],
            },
        )
        if is_commit(row["delivered_commit"]):
            project["delivered"].append(DeliveredTask(row["id"], row["key"], row["delivered_commit"]))
    return [
        LandingProject(**{**project, "delivered": tuple(project["delivered"])})
        for project in projects.values()
        if project["delivered"]
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


def heads_in_target(project: LandingProject) -> LandedOutside:
    """The project's delivered tasks whose head is an ancestor of (or is) the target's tip."""
    tip, local = target_tip(project)
    return {
        task.task_id: (task.head, tip)
        for task in project.delivered
        if task.head == tip or (local is not None and local.contains(task.head, tip))
    }


def landed_outside(projects: Iterable[LandingProject]) -> tuple[LandedOutside, list[dict[str, Any]]]:
    """Every delivered head already in its target, and one error per project whose target git could not read."""
    landed: LandedOutside = {}
    errors: list[dict[str, Any]] = []
    for project in projects:
        try:
            landed.update(heads_in_target(project))
        except GitError as exc:
            errors.append(
                {
                    "project": project.slug,
                    "repository": project.remote or project.repository,
                    "message": f"landing target {project.target_branch}: {exc}",
                }
            )
    return landed, errors
