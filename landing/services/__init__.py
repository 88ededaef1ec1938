"""Every write of the landing queue (SPEC §21). Doors import from here."""

from __future__ import annotations

from landing.services.checks import CheckReport, check_report
from landing.services.claiming import LandingGrant, landing_claim_next
from landing.services.finishing import TaskResult, landing_finish
from landing.services.holding import LandingProof, landing_renew
from landing.services.lapsing import expire_lapsed_landings, landing_hand_back
from landing.services.reconciled import tasks_landed_outside
from landing.services.releasing import Released, landing_release
from landing.services.settings import LandingSettings, project_set_landing

__all__ = [
    "CheckReport",
    "LandingGrant",
    "LandingProof",
    "LandingSettings",
    "Released",
    "TaskResult",
    "check_report",
    "expire_lapsed_landings",
    "landing_claim_next",
    "landing_finish",
    "landing_hand_back",
    "landing_release",
    "landing_renew",
    "project_set_landing",
    "tasks_landed_outside",
]
