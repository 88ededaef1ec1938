"""Every write of the runners room (SPEC §23.1). Doors import from here."""

from __future__ import annotations

from runners.services.cancelling import slot_cancel_attempt
from runners.services.creating import runner_create, runner_rotate_token
from runners.services.heartbeats import (
    HEARTBEAT_SECONDS,
    LOST_AFTER_MISSED,
    HeartbeatAnswer,
    SlotReport,
    runner_heartbeat,
    runners_mark_lost,
)
from runners.services.pausing import runner_cordon, runner_drain, runner_uncordon, runner_undrain
from runners.services.registering import HandedOffAttempt, Registration, SlotCredential, runner_register

__all__ = [
    "HEARTBEAT_SECONDS",
    "LOST_AFTER_MISSED",
    "HandedOffAttempt",
    "HeartbeatAnswer",
    "Registration",
    "SlotCredential",
    "SlotReport",
    "runner_cordon",
    "runner_create",
    "runner_drain",
    "runner_heartbeat",
    "runner_register",
    "runner_rotate_token",
    "runner_uncordon",
    "runner_undrain",
    "runners_mark_lost",
    "slot_cancel_attempt",
]
