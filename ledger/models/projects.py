"""Projects: a repository, its isolation, its budgets and how its tasks' paths are checked."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from ledger.models.base import NoDeleteModel


class Isolation(models.TextChoices):
    """Environment isolation, ordered weakest first (SPEC §6).

    Declared here because `Project.required_isolation` needs it and `ledger`
    imports no other app; `environments` uses the same choices.
    """

    NONE = "none", "None"
    DIRECTORY = "directory", "Directory"
    CONTAINER = "container", "Container"
    MICROVM = "microvm", "MicroVM"
    DEDICATED_HOST = "dedicated_host", "Dedicated host"

    @classmethod
    def rank(cls, value: str) -> int:
        return list(cls.values).index(value)


# SPEC §19: budgets count tokens (input + output) and US dollars with 6 decimals.
BUDGET_COST_DIGITS = 18
BUDGET_TOKENS_HELP = "Tokens (input + output) per UTC day; empty: no limit."
BUDGET_COST_HELP = "US dollars per UTC day; empty: no limit."


class PathsMode(models.TextChoices):
    """How a claim holds its paths (SPEC §19): alone, or alongside other shared holders."""

    EXCLUSIVE = "exclusive", "Exclusive"
    SHARED = "shared", "Shared"


class LandMethod(models.TextChoices):
    """How a lander lands a delivered branch on the target (SPEC §21.1); `none`: merges happen elsewhere."""

    MERGE = "merge", "Merge commit (--no-ff)"
    SQUASH = "squash", "Squash"
    REBASE = "rebase", "Rebase, then fast-forward"
    NONE = "none", "None (merged elsewhere, e.g. a forge)"


CHECK_TIMEOUT_DEFAULT_SECONDS = 1800
BATCH_MAX_LIMIT = 64


class Project(NoDeleteModel):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    key_prefix = models.CharField(
        max_length=10,
        unique=True,
        validators=[RegexValidator(r"^[A-Z][A-Z0-9]{0,9}$", "Uppercase letters and digits, starting with a letter.")],
        help_text="Prefix of task keys, e.g. WEB in WEB-412.",
    )
    repository = models.CharField(max_length=500, blank=True, help_text="Local path or git URL.")
    remote = models.CharField(
        max_length=500, blank=True, help_text="URL agents push to; read with `git ls-remote` for pushed state."
    )
    default_branch = models.CharField(max_length=200, default="main")
    default_lease_seconds = models.PositiveIntegerField(default=900)
    queue_wait_max_seconds = models.PositiveIntegerField(default=3600)
    required_isolation = models.CharField(max_length=20, choices=Isolation.choices, default=Isolation.NONE)
    # SPEC §16.1, §16.4: who may review whose work, and when a failing task is quarantined.
    allow_self_review = models.BooleanField(default=False, help_text="The agent that did the work may also review it.")
    max_consecutive_failures = models.PositiveIntegerField(
        default=3, help_text="Failed or expired attempts in a row before a task is quarantined (0: never)."
    )
    # The last task number handed out. Incremented by a conditional UPDATE in
    # the task-creating transaction, which makes keys gap-free: a rolled-back
    # creation rolls the increment back with it.
    task_sequence = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)
    # SPEC §19: what the project's agents may spend per UTC day (null: no limit).
    daily_budget_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text=BUDGET_TOKENS_HELP)
    daily_budget_cost_usd = models.DecimalField(
        max_digits=BUDGET_COST_DIGITS, decimal_places=6, null=True, blank=True, help_text=BUDGET_COST_HELP
    )

    # SPEC §21.1: landing. An empty `target_branch` is landing off (part two's behaviour: finish `done` is done).
    target_branch = models.CharField(
        max_length=200, blank=True, help_text="Branch delivered work lands on; empty: landing off."
    )
    land_method = models.CharField(max_length=8, choices=LandMethod.choices, default=LandMethod.MERGE)
    check_command = models.TextField(
        blank=True, help_text="Shell command a lander runs in the candidate tree (e.g. `make test`); empty: none."
    )
    check_timeout_seconds = models.PositiveIntegerField(
        default=CHECK_TIMEOUT_DEFAULT_SECONDS, validators=[MinValueValidator(1)]
    )
    required_approvals = models.PositiveSmallIntegerField(
        default=0, help_text="Approved reviews at the delivered head a task needs to land (0: none)."
    )
    required_checks = models.JSONField(default=list, blank=True, help_text="Check names that must pass (SPEC §22).")
    batch_max = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(BATCH_MAX_LIMIT)],
        help_text="Delivered tasks a lander takes at once (1: one by one).",
    )
    max_failed_landings = models.PositiveIntegerField(
        default=3, help_text="Failed landings in a row before a task is quarantined (0: never)."
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(land_method__in=LandMethod.values), name="project_land_method_valid"),
            models.CheckConstraint(
                condition=Q(batch_max__gte=1, batch_max__lte=BATCH_MAX_LIMIT), name="project_batch_max_range"
            ),
            models.CheckConstraint(condition=Q(check_timeout_seconds__gte=1), name="project_check_timeout_positive"),
        ]

    @property
    def landing_on(self) -> bool:
        return bool(self.target_branch)

    def __str__(self) -> str:
        return self.slug
