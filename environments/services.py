"""Writes to the environment catalog. Each appends its event in its own transaction."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from core.db import write_transaction
from core.errors import ValidationFailed
from environments.models import RESOURCE_KEYS, Environment, EnvironmentStatus
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Project, Severity
from ledger.services import event_append, validate_model

STATUS_EVENTS: dict[str, EventType] = {
    EnvironmentStatus.AVAILABLE: EventType.ENVIRONMENT_RESTORED,
    EnvironmentStatus.QUARANTINED: EventType.ENVIRONMENT_QUARANTINED,
    EnvironmentStatus.RETIRED: EventType.ENVIRONMENT_RETIRED,
}


def clean_resources(resources: Any) -> dict[str, Any]:
    """Check the resources mapping; a database URL must not carry a password."""
    if not isinstance(resources, dict):
        raise ValidationFailed("resources must be an object.")
    unknown = sorted(set(resources) - set(RESOURCE_KEYS))
    if unknown:
        raise ValidationFailed(
            f"Unknown resource keys: {', '.join(unknown)}; allowed: {', '.join(RESOURCE_KEYS)}.",
            details={"fields": {"resources": [f"unknown keys {unknown}"]}},
        )
    url = resources.get("database_url")
    if url is not None:
        if not isinstance(url, str) or not urlsplit(url).scheme:
            raise ValidationFailed("resources.database_url must be a URL.")
        if urlsplit(url).password:
            raise ValidationFailed(
                "resources.database_url must not contain a password; put it in the secret store and "
                "name it in credentials_ref.",
                details={"fields": {"resources": ["database_url carries a password"]}},
            )
    ports = resources.get("ports")
    if ports is not None and (
        not isinstance(ports, list)
        or not all(isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports)
    ):
        raise ValidationFailed("resources.ports must be a list of TCP port numbers.")
    for key in ("container_name", "host_path", "rate_limit_key"):
        if key in resources and not isinstance(resources[key], str):
            raise ValidationFailed(f"resources.{key} must be a string.")
    return dict(resources)


@write_transaction
def environment_create(
    *,
    project: Project,
    name: str,
    kind: str,
    actor: Actor,
    isolation: str = "none",
    resources: dict[str, Any] | None = None,
    credentials_ref: str = "",
) -> Environment:
    now = clock.now()
    environment = Environment(
        project=project,
        name=name,
        kind=kind,
        isolation=isolation,
        resources=clean_resources(resources or {}),
        credentials_ref=credentials_ref,
        created_at=now,
        updated_at=now,
    )
    validate_model(environment)
    if Environment.objects.filter(project=project, name=name).exists():
        raise ValidationFailed(f"{project.slug} has an environment named {name!r}.")
    environment.save()
    event_append(
        type=EventType.ENVIRONMENT_CREATED,
        actor=actor,
        at=now,
        project=project,
        payload={"environment": name, "kind": kind, "isolation": isolation},
    )
    return environment


@write_transaction
def environment_set_status(*, environment: Environment, status: str, actor: Actor, reason: str = "") -> Environment:
    """Quarantine, retire or make available again. Quarantining keeps it for inspection."""
    if status not in EnvironmentStatus.values:
        raise ValidationFailed(f"status must be one of {', '.join(EnvironmentStatus.values)}.")
    if status == EnvironmentStatus.QUARANTINED and not reason.strip():
        raise ValidationFailed("Quarantining needs a reason.", details={"fields": {"reason": ["required"]}})
    now = clock.now()
    locked = Environment.objects.select_for_update(no_key=True).get(pk=environment.pk)
    if locked.status == status:
        return locked
    previous = locked.status
    locked.status, locked.status_reason, locked.updated_at = status, reason, now
    locked.save(update_fields=["status", "status_reason", "updated_at"])
    event_append(
        type=STATUS_EVENTS[status],
        severity=Severity.WARN if status == EnvironmentStatus.QUARANTINED else Severity.INFO,
        actor=actor,
        at=now,
        project=locked.project,
        payload={"environment": locked.name, "from": previous, "reason": reason[:500]},
    )
    return locked


MAPPING_FIELDS = ("kind", "isolation", "resources", "credentials_ref")


@write_transaction
def environment_update(*, environment: Environment, actor: Actor, changes: dict[str, Any]) -> Environment:
    """Change how an environment maps to its sandbox: kind, isolation, resources, credentials reference.

    A live allocation keeps running on the new mapping; reconciliation reports
    a collision or insufficient isolation the change may cause.
    """
    unknown = sorted(set(changes) - set(MAPPING_FIELDS))
    if unknown:
        raise ValidationFailed(f"These fields cannot be changed here: {', '.join(unknown)}.")
    now = clock.now()
    locked = Environment.objects.select_for_update(no_key=True).select_related("project").get(pk=environment.pk)
    if "resources" in changes:
        changes = {**changes, "resources": clean_resources(changes["resources"])}
    changed = sorted(name for name, value in changes.items() if getattr(locked, name) != value)
    if not changed:
        return locked
    for name in changed:
        setattr(locked, name, changes[name])
    locked.updated_at = now
    validate_model(locked)
    locked.save(update_fields=[*changed, "updated_at"])
    event_append(
        type=EventType.ENVIRONMENT_UPDATED,
        actor=actor,
        at=now,
        project=locked.project,
        payload={"environment": locked.name, "fields": changed},
    )
    return locked
