"""Every write that involves leases. Doors import from here."""

from __future__ import annotations

from leases.services.allocations import allocation_release
from leases.services.cancelling import Cancelled, task_cancel
from leases.services.claim_next import anything_to_claim, lease_claim_next
from leases.services.claims import LeaseGrant, lease_claim
from leases.services.command_tokens import attempt_mint_token
from leases.services.expiry import SweepReport, check_queue_wait, expire_lapsed, sweep_expired
from leases.services.finishing import Finished, Outcome, attempt_finish, attempt_release
from leases.services.handing_off import HandedOff, attempt_hand_off
from leases.services.holding import HolderProof, attempt_renew
from leases.services.membership import agent_set_projects
from leases.services.notes import NoteWritten, attempt_set_git, note_add
from leases.services.quarantine import task_release_quarantine
from leases.services.review_claims import ReviewGrant, review_claim, review_claim_next
from leases.services.reviews import ReviewOutcome, review_decide
from leases.services.revoke import Revocation, task_force_release, task_reassign
from leases.services.task_updates import TaskUpdated, task_update

__all__ = [
    "Cancelled",
    "Finished",
    "HandedOff",
    "HolderProof",
    "LeaseGrant",
    "NoteWritten",
    "Outcome",
    "ReviewGrant",
    "ReviewOutcome",
    "Revocation",
    "SweepReport",
    "TaskUpdated",
    "agent_set_projects",
    "allocation_release",
    "anything_to_claim",
    "attempt_finish",
    "attempt_hand_off",
    "attempt_mint_token",
    "attempt_release",
    "attempt_renew",
    "attempt_set_git",
    "check_queue_wait",
    "expire_lapsed",
    "lease_claim",
    "lease_claim_next",
    "note_add",
    "review_claim",
    "review_claim_next",
    "review_decide",
    "sweep_expired",
    "task_cancel",
    "task_force_release",
    "task_reassign",
    "task_release_quarantine",
    "task_update",
]
