"""Projects: creation, and the task key prefix derived from a slug."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

from django.db.models import Q

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Isolation, Project
from ledger.services.events import event_append
from ledger.services.validation import validate_model


def key_prefix_from_slug(slug: str) -> str:
    prefix = re.sub(r"[^A-Za-z0-9]", "", slug).upper()[:10]
    if not prefix or not prefix[0].isalpha():
        raise ValidationFailed(
            f"Cannot derive a task key prefix from slug {slug!r}; give one explicitly.",
            details={"fields": {"key_prefix": ["required"]}},
        )
    return prefix


# `scheme://…` or scp-like `user@host:path`: what `git ls-remote` reads as a URL.
_REMOTE_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://\S+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+)$")


_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def validate_remote(remote: str, *, field: str = "remote") -> str:
    """A project's remote: a git URL without a password (credentials belong to the git client, not the ledger),
    or an absolute path on this machine, as git itself accepts (`/srv/git/web.git`, issue 29)."""
    remote = remote.strip()
    if not remote:
        return ""
    if remote.startswith("/") and field == "remote":
        return _absolute_path(remote, field=field)
    if not _REMOTE_URL.match(remote) or _CONTROL_CHARACTER.search(remote):
        raise ValidationFailed(
            f"{field} must be a git URL (https://…, ssh://…, file://… or user@host:path)"
            + (" or an absolute path." if field == "remote" else "."),
            details={"fields": {field: ["a git URL or an absolute path" if field == "remote" else "a git URL"]}},
        )
    if "://" in remote and urlsplit(remote).password:
        raise ValidationFailed(
            f"{field} must not contain a password; configure git's credentials instead.",
            details={"fields": {field: ["carries a password"]}},
        )
    return remote


# A branch name git reads as one ref: letters, digits, `._/-`, no leading `-` or `/`, no `..` or `//`.
_DEFAULT_BRANCH = re.compile(r"^(?![-/.])(?!.*(?:\.\.|//|/\.))[A-Za-z0-9._/-]{1,200}(?<![/.])(?<!\.lock)$")


def validate_default_branch(name: str) -> str:
    """A project's default branch: a plain branch name, so it can never reach git as an option or a range."""
    if not isinstance(name, str) or not _DEFAULT_BRANCH.match(name):
        raise ValidationFailed(
            "default_branch must be a branch name: letters, digits and ._/- , not starting with '-' or '/'.",
            details={"fields": {"default_branch": ["a branch name"]}},
        )
    return name


def is_local_repository(validated: str) -> bool:
    """A validated repository or remote that is a path on this machine or a `file://` URL: read in place."""
    return validated.startswith("/") or validated.lower().startswith("file:")


def validate_repository(repository: str) -> str:
    """A project's repository: a git URL (as a remote), or an absolute, normalised path on this machine.

    A path is never relative (it would depend on the server's working
    directory), never has `..` or control characters, and never starts with
    `-`, so git can only read it as the directory it names.
    """
    repository = repository.strip()
    if not repository or "://" in repository or (_REMOTE_URL.match(repository) and not repository.startswith("/")):
        return validate_remote(repository, field="repository")
    return _absolute_path(repository, field="repository")


def _absolute_path(path: str, *, field: str) -> str:
    """An absolute, normalised path without `..` or control characters, so git reads only the directory it names."""
    if not path.startswith("/") or _CONTROL_CHARACTER.search(path) or ".." in path.split("/") or len(path) > 500:
        raise ValidationFailed(
            f"{field} must be a git URL or an absolute path without '..' or control characters.",
            details={"fields": {field: ["a git URL or an absolute path"]}},
        )
    return posixpath.normpath(path)


@write_transaction
def project_create(
    *,
    slug: str,
    name: str,
    actor: Actor,
    key_prefix: str = "",
    repository: str = "",
    remote: str = "",
    default_branch: str = "main",
    default_lease_seconds: int = 900,
    queue_wait_max_seconds: int = 3600,
    required_isolation: str = Isolation.NONE,
    allow_self_review: bool = False,
    max_consecutive_failures: int = 3,
) -> Project:
    """Create a project; its `remote`, if any, is the git URL reconciliation reads pushed state from."""
    now = clock.now()
    project = Project(
        slug=slug,
        name=name,
        key_prefix=key_prefix or key_prefix_from_slug(slug),
        repository=validate_repository(repository),
        remote=validate_remote(remote),
        default_branch=validate_default_branch(default_branch),
        default_lease_seconds=default_lease_seconds,
        queue_wait_max_seconds=queue_wait_max_seconds,
        required_isolation=required_isolation,
        allow_self_review=allow_self_review,
        max_consecutive_failures=max_consecutive_failures,
        created_at=now,
    )
    validate_model(project)
    if Project.objects.filter(Q(slug=slug) | Q(key_prefix=project.key_prefix)).exists():
        raise ValidationFailed(
            f"A project with slug {slug!r} or key prefix {project.key_prefix!r} exists.",
            details={"fields": {"slug": ["taken"]}},
        )
    project.save()
    event_append(
        type=EventType.PROJECT_CREATED,
        actor=actor,
        at=now,
        project=project,
        payload={"slug": slug, "key_prefix": project.key_prefix},
    )
    return project
