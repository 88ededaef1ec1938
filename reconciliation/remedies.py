"""What to do about each reconciliation condition: the remedy column of docs/operations.md, word for word.

Shown on each finding's page; `tests/reconciliation/test_remedies.py` fails when the two drift.
"""

from __future__ import annotations

from reconciliation.models import Condition

REMEDIES: dict[str, str] = {
    Condition.LIVE_LEASE_DEAD_AGENT: (
        "check the agent's process; a lease keeper may be renewing for a dead agent. Force-release the "
        "task if it is gone"
    ),
    Condition.STALLED_ATTEMPT: (
        "ask the agent (it may be stuck in a loop or waiting on a prompt); revoke it if it does not "
        "answer. Any work by the holder resolves it"
    ),
    Condition.EXPIRED_LEASE_STILL_ACTIVE: (
        "the sweep fixes it within a minute; if it persists, the cluster is not running"
    ),
    Condition.BRANCH_MISSING: ("the agent has not pushed, or works elsewhere; ask it, or check `Project.repository`"),
    Condition.ORPHAN_BRANCH: (
        "review the work: re-open the task to continue it, merge it, or delete the branch yourself. The "
        "ledger never deletes branches"
    ),
    Condition.DUPLICATE_BRANCH_LABEL: ("revoke or re-branch one of them before their work collides"),
    Condition.LEAKED_ENVIRONMENT: (
        "inspect the environment, then release the stale allocation or quarantine the environment in the "
        "admin; a re-claim of the same task may also inherit it"
    ),
    Condition.ENVIRONMENT_COLLISION: ("fix the environments' resources; release or quarantine one"),
    Condition.INSUFFICIENT_ISOLATION: ("release the attempt or move it to a stronger environment"),
    Condition.COMPLETED_BRANCH_MISSING: (
        "find the work (the agent's machine, `detail.head_commit`) and push the branch, or re-open the task"
    ),
    Condition.ORPHAN_WORKTREE: ("its `detail.disposition` says `removable` or `quarantined`, and `detail.reasons` why"),
    Condition.UNRESERVED_CHANGE: (
        "the two agents' work collides: review the change with the reservation's holder before merging; it "
        "resolves when that reservation ends"
    ),
}
