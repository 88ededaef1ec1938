"""What a finding's page offers (SPEC §7): the fitting actions, the work that may be discarded, the triage forms.

`triage_actions` lists the buttons for a finding's condition, each leading to
an existing service's confirmation page: force-release the attempt (the
task's revoke confirmation), release stale allocations or quarantine the
environment (the environment actions), discard an ended attempt's work
(`discardable_attempt`, confirmed on the finding's own `discard/` page), open
the task. `AcknowledgeForm` and `ResolveForm` are the page's two forms.
`console.audit.findings.FindingAdmin` shows and answers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.urls import reverse

from console.audit.alerts import finding_task
from leases.models import Attempt, AttemptStatus
from ledger import clock
from reconciliation.models import AttemptDiscard, Finding, SubjectType

# Conditions whose remedy, once the attempt has ended, may be to give up its work.
DISCARD_CONDITIONS = frozenset({"orphan_branch", "orphan_worktree", "completed_branch_missing"})


class AcknowledgeForm(forms.Form):
    owner = forms.CharField(max_length=200, required=False, help_text="Who is on it (default: you).")
    note = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 50}))


class ResolveForm(forms.Form):
    note = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 50}))


@dataclass(frozen=True)
class TriageAction:
    label: str
    url: str
    method: str = "get"  # "post": a form posting `fields` (an environment list action)
    fields: tuple[tuple[str, str], ...] = ()
    danger: bool = False
    element_id: str = ""
    # The permission the action's page checks: an action the user cannot perform is not offered.
    permission: str = ""


def _live(attempt: Attempt | None) -> bool:
    return attempt is not None and attempt.status == AttemptStatus.ACTIVE and attempt.lease_expires_at > clock.now()


def discardable_attempt(finding: Finding) -> Attempt | None:
    """The ended attempt whose work the finding is about: its own, or the latest one that named its branch."""
    if finding.condition not in DISCARD_CONDITIONS:
        return None
    attempt = finding.attempt
    if attempt is None:
        detail = finding.detail if isinstance(finding.detail, dict) else {}
        branch = finding.subject_key if finding.subject_type == SubjectType.BRANCH else detail.get("branch")
        if branch:
            attempt = Attempt.objects.filter(task__project=finding.project, branch=branch).order_by("-id").first()
    if attempt is None or attempt.status == AttemptStatus.ACTIVE:
        return None
    if AttemptDiscard.objects.filter(attempt=attempt).exists():
        return None  # discarded already: a second discard would record nothing
    return attempt


def triage_actions(finding: Finding, *, user: Any) -> list[TriageAction]:
    """The remedies the finding's page offers `user`: only those whose page would let it through."""
    return [action for action in _triage_actions(finding) if user.has_perm(action.permission)]


def _triage_actions(finding: Finding) -> list[TriageAction]:
    actions: list[TriageAction] = []
    task = finding_task(finding)
    if finding.attempt is not None and _live(finding.attempt):
        actions.append(
            TriageAction(
                label="Force-release the attempt…",
                url=reverse("admin:ledger_task_force_release", args=[finding.attempt.task_id]),
                danger=True,
                element_id="lh-triage-force-release",
                permission="ledger.change_task",
            )
        )
    if finding.environment_id:
        changelist = reverse("admin:environments_environment_changelist")
        selected = (("_selected_action", str(finding.environment_id)),)
        actions.append(
            TriageAction(
                label="Release stale allocations",
                url=changelist,
                method="post",
                fields=(("action", "release_stale_allocations"), *selected),
                element_id="lh-triage-release-environment",
                permission="environments.change_environment",
            )
        )
        actions.append(
            TriageAction(
                label="Quarantine the environment…",
                url=changelist,
                method="post",
                fields=(("action", "quarantine"), *selected),
                danger=True,
                element_id="lh-triage-quarantine",
                permission="environments.change_environment",
            )
        )
    discard = discardable_attempt(finding)
    if discard is not None:
        actions.append(
            TriageAction(
                label=f"Discard the work of attempt {discard.task.key} #{discard.epoch}…",
                url=reverse("admin:reconciliation_finding_discard", args=[finding.pk]),
                danger=True,
                element_id="lh-triage-discard",
                permission="reconciliation.change_finding",
            )
        )
    if task is not None:
        actions.append(
            TriageAction(
                label=f"Open the task {task.key}",
                url=reverse("admin:ledger_task_change", args=[task.pk]),
                element_id="lh-triage-open-task",
                permission="ledger.view_task",
            )
        )
    return actions
