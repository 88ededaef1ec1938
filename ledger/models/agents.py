"""Agents: who claims work, by handle and kind."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from ledger.models.base import NoDeleteModel
from ledger.models.projects import BUDGET_COST_DIGITS, BUDGET_COST_HELP, BUDGET_TOKENS_HELP, Project


class AgentKind(models.TextChoices):
    CLAUDE = "claude", "Claude"
    CODEX = "codex", "Codex"
    COPILOT = "copilot", "Copilot"
    CURSOR = "cursor", "Cursor"
    AI = "ai", "Other AI"
    HUMAN = "human", "Human"
    SCRIPT = "script", "Script"
    # SPEC §22: a CI job that reports check results.
    CI = "ci", "CI"


HANDLE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class Agent(NoDeleteModel):
    handle = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(HANDLE_PATTERN, "Lowercase letters, digits, '.', '_' and '-'.")],
    )
    kind = models.CharField(max_length=16, choices=AgentKind.choices)
    # SHA-256 of the API token; the token itself is shown once and never stored.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    projects = models.ManyToManyField(Project, blank=True, related_name="agents")
    is_active = models.BooleanField(default=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    deactivated_at = models.DateTimeField(null=True, blank=True)
    # Paused (drained): no new claims, while its live leases renew and finish as usual
    # (`ledger.services.agent_pause`). Null: claiming.
    claims_paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    pause_reason = models.CharField(max_length=500, blank=True, editable=False)
    # SPEC §23.1: what this agent can do (`gpu`, `postgres`, …); it claims only tasks whose `requires` are all here.
    # A runner's slots carry their runner's labels.
    labels = models.JSONField(default=list, blank=True)
    # SPEC §19: what this agent may spend per UTC day, over all its projects (null: no limit).
    daily_budget_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text=BUDGET_TOKENS_HELP)
    daily_budget_cost_usd = models.DecimalField(
        max_digits=BUDGET_COST_DIGITS, decimal_places=6, null=True, blank=True, help_text=BUDGET_COST_HELP
    )

    class Meta:
        ordering = ["handle"]

    def __str__(self) -> str:
        return self.handle
