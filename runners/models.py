"""Runners and their slots (SPEC §23.1): the machines of the fleet, registered by an admin.

A runner is one daemon on one machine (`leasehold runner`). It authenticates with its own token
(`lhr_…`, stored as its SHA-256) on the runner endpoints only; each of its slots is an agent of its
own (`NAME.1` … `NAME.N`, kind `script`) whose token the server mints afresh at every registration,
so leases, budgets, statistics and audit stay per slot and a zombie process from before a restart
is fenced out. What a slot is doing is what the runner last reported in its heartbeat.
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from ledger.models import Agent, NoDeleteModel, Project

# No dot: a slot agent's handle is `NAME.N`, and must still fit an agent handle (64 characters).
RUNNER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,59}$"
MAX_SLOTS = 64
HOST_MAX_CHARS = 200
VERSION_MAX_CHARS = 100
LABEL_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,39}$"
MAX_LABELS = 20


class SlotState(models.TextChoices):
    IDLE = "idle", "Idle"
    CLAIMING = "claiming", "Claiming"
    WORKING = "working", "Working"
    LANDING = "landing", "Landing"
    STOPPING = "stopping", "Stopping"


BUSY_STATES = frozenset({SlotState.WORKING, SlotState.LANDING, SlotState.STOPPING})


class Runner(NoDeleteModel):
    name = models.CharField(
        max_length=60,
        unique=True,
        validators=[RegexValidator(RUNNER_NAME_PATTERN, "Lowercase letters, digits, '_' and '-'.")],
    )
    # SHA-256 of the runner token; the token itself is shown once and never stored.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    projects = models.ManyToManyField(Project, blank=True, related_name="runners")
    # What its slots can do (`gpu`, …): every slot agent carries them (`ledger.Agent.labels`).
    labels = models.JSONField(default=list, blank=True)
    slots = models.PositiveSmallIntegerField()
    # What the daemon said at its last registration.
    host = models.CharField(max_length=HOST_MAX_CHARS, blank=True)
    version = models.CharField(max_length=VERSION_MAX_CHARS, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Set by the lost-runner job when heartbeats stop (`runner.lost`, once); cleared by a heartbeat or registration.
    lost_at = models.DateTimeField(null=True, blank=True)
    # Cordoned: takes no new work. Draining: finishes what runs, takes no new work. Both pause the slot agents.
    cordoned_at = models.DateTimeField(null=True, blank=True)
    draining_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(slots__gte=1) & Q(slots__lte=MAX_SLOTS), name="runner_slots_range"),
        ]
        indexes = [
            # Serves the lost-runner job: active runners not yet lost, by their last heartbeat.
            models.Index(
                fields=["last_heartbeat_at"],
                condition=Q(is_active=True, lost_at__isnull=True),
                name="runner_live_heartbeat",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class RunnerSlot(NoDeleteModel):
    runner = models.ForeignKey(Runner, on_delete=models.PROTECT, related_name="slot_rows")
    number = models.PositiveSmallIntegerField()
    agent = models.OneToOneField(Agent, on_delete=models.PROTECT, related_name="runner_slot")
    state = models.CharField(max_length=16, choices=SlotState.choices, default=SlotState.IDLE)
    # What the runner last reported for the slot (plain ids: a report, not a reference the ledger vouches for).
    attempt_id = models.BigIntegerField(null=True, blank=True)
    task_key = models.CharField(max_length=20, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)
    # A cancel asked from the console (`slot_cancel_attempt`): the runner's heartbeat is told to stop it.
    cancel_attempt_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["runner_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["runner", "number"], name="runner_slot_number_unique"),
            models.CheckConstraint(condition=Q(state__in=SlotState.values), name="runner_slot_state_valid"),
            models.CheckConstraint(condition=Q(number__gte=1), name="runner_slot_number_positive"),
        ]
        indexes = [
            # Serves the heartbeat's cancel list and the console's "cancel pending": slots with a cancel asked.
            models.Index(
                fields=["runner", "cancel_attempt_id"],
                condition=Q(cancel_attempt_id__isnull=False),
                name="runner_slot_cancel_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.runner_id} slot {self.number} ({self.state})"
