"""The catalog of runtimes agents work in: preview databases, ports, containers, sandboxes (SPEC §6).

Possession of an environment is an allocation, which lives in `leases`.
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from ledger.models import Isolation, NoDeleteModel, Project

ENVIRONMENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
RESOURCE_KEYS = ("database_url", "ports", "container_name", "host_path", "rate_limit_key")


class EnvironmentKind(models.TextChoices):
    DATABASE = "database", "Database"
    PORT = "port", "Port"
    CONTAINER = "container", "Container"
    SANDBOX = "sandbox", "Sandbox"
    VM = "vm", "VM"
    OTHER = "other", "Other"


class EnvironmentStatus(models.TextChoices):
    AVAILABLE = "available", "Available"
    QUARANTINED = "quarantined", "Quarantined"
    RETIRED = "retired", "Retired"


class Environment(NoDeleteModel):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="environments")
    name = models.CharField(
        max_length=100,
        validators=[RegexValidator(ENVIRONMENT_NAME_PATTERN, "Letters, digits, '.', '_' and '-'.")],
    )
    kind = models.CharField(max_length=16, choices=EnvironmentKind.choices)
    isolation = models.CharField(max_length=20, choices=Isolation.choices, default=Isolation.NONE)
    resources = models.JSONField(
        default=dict,
        blank=True,
        help_text="database_url (no password), ports, container_name, host_path, rate_limit_key.",
    )
    credentials_ref = models.CharField(
        max_length=200, blank=True, help_text="A name in the operator's secret store; never a secret."
    )
    status = models.CharField(max_length=16, choices=EnvironmentStatus.choices, default=EnvironmentStatus.AVAILABLE)
    status_reason = models.TextField(blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["project_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="environment_name_unique_per_project"),
            models.CheckConstraint(condition=Q(status__in=EnvironmentStatus.values), name="environment_status_valid"),
        ]
        indexes = [
            # Serves "any available environment of kind K".
            models.Index(fields=["project", "kind", "status"], name="environment_pool"),
        ]

    def __str__(self) -> str:
        return self.name
