"""The Reviews page (SPEC §16.1): review requests by project and status; people decide here too.

Approve, request changes and block go through `leases.services.review_decide` — the rules of a
review attempt's finish — after a confirmation page that records a reason (the decision's
summary; for a block, the task's blocked reason) and, when changes are requested, the findings
(one per line, at most 20 of at most 500 characters). Approving a target that moved since the
request is refused (STALE_REVIEW_TARGET) and supersedes the request. A review a reviewer agent
holds under a live lease is refused: force-release the task first. Requests are never deleted.

Each request has its own page (`console.tasks.review_page`): the worker's summary, the checks at
head and the branch's diff, with Approve / Request changes / Block buttons that lead to the same
confirmation (`<id>/decide/<action>/`).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import ConfirmationForm, LeaseholdModelAdmin, actor_of, badge, moment, plural, task_link
from console.confirm import Confirmation, is_confirmed, render_confirmation
from console.tasks.review_page import review_diff
from core.errors import LedgerError
from leases.models import (
    PENDING_REVIEW_STATUSES,
    REVIEW_FINDING_MAX_CHARS,
    REVIEW_FINDINGS_MAX_ITEMS,
    ReviewRequest,
)
from leases.services import ReviewOutcome, review_decide

VERBS = {
    ReviewOutcome.APPROVED: ("Approve", "approved"),
    ReviewOutcome.CHANGES_REQUESTED: ("Request changes on", "sent back for changes"),
    ReviewOutcome.BLOCKED: ("Block", "blocked"),
}

ACTION_NAMES = {
    ReviewOutcome.APPROVED: "approve",
    ReviewOutcome.CHANGES_REQUESTED: "request_changes",
    ReviewOutcome.BLOCKED: "block",
}


class ReviewDecisionForm(ConfirmationForm):
    findings = forms.CharField(
        label="Findings (one per line)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 5, "cols": 60}),
        help_text=f"At most {REVIEW_FINDINGS_MAX_ITEMS} findings of at most {REVIEW_FINDING_MAX_CHARS} characters.",
    )

    def clean_findings(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data.get("findings", "").splitlines() if line.strip()]
        if len(lines) > REVIEW_FINDINGS_MAX_ITEMS:
            raise forms.ValidationError(f"At most {REVIEW_FINDINGS_MAX_ITEMS} findings; you gave {len(lines)}.")
        if any(len(line) > REVIEW_FINDING_MAX_CHARS for line in lines):
            raise forms.ValidationError(f"Each finding is at most {REVIEW_FINDING_MAX_CHARS} characters.")
        return lines


class ReviewRequestAdmin(LeaseholdModelAdmin):
    list_display = [
        "id",
        "task_key",
        "status_badge",
        "worker",
        "reviewer",
        "task_version",
        "head",
        "created",
        "decided",
    ]
    list_display_links = ["id"]
    list_filter = ["task__project", "status"]
    search_fields = ["=task__key"]
    list_select_related = ["task", "work_attempt__agent", "reviewer_agent", "reviewer_user"]
    ordering = ["-id"]
    actions = ["approve", "request_changes", "block"]
    readonly_fields = (
        "task_key",
        "status_badge",
        "worker",
        "work_attempt_link",
        "task_version",
        "head_commit",
        "reviewer",
        "summary",
        "findings_list",
        "created",
        "decided",
    )
    fields = readonly_fields
    change_form_template = "admin/leases/reviewrequest/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="task", ordering="task__number")
    def task_key(self, review: ReviewRequest) -> SafeString:
        return task_link(review.task_id, review.task.key)

    @admin.display(description="status", ordering="status")
    def status_badge(self, review: ReviewRequest) -> SafeString:
        return badge(review.status)

    @admin.display(description="work by")
    def worker(self, review: ReviewRequest) -> str:
        return review.work_attempt.agent.handle

    @admin.display(description="work attempt")
    def work_attempt_link(self, review: ReviewRequest) -> SafeString:
        url = reverse("admin:leases_attempt_change", args=[review.work_attempt_id])
        return format_html('<a href="{}">#{}</a>', url, review.work_attempt_id)

    @admin.display(description="reviewer")
    def reviewer(self, review: ReviewRequest) -> str:
        return review.reviewer_label or "—"

    @admin.display(description="head")
    def head(self, review: ReviewRequest) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', (review.head_commit or "—")[:12])

    @admin.display(description="findings")
    def findings_list(self, review: ReviewRequest) -> SafeString:
        if not review.findings:
            return format_html("{}", "—")
        items = format_html("".join("<li>{}</li>" for _ in review.findings), *review.findings)
        return format_html("<ol>{}</ol>", items)

    @admin.display(description="requested", ordering="created_at")
    def created(self, review: ReviewRequest) -> str:
        return moment(review.created_at)

    @admin.display(description="decided", ordering="decided_at")
    def decided(self, review: ReviewRequest) -> str:
        return moment(review.decided_at) if review.decided_at else "—"

    # --- decisions ----------------------------------------------------------

    def _decide_flow(
        self,
        request: HttpRequest,
        queryset: QuerySet[ReviewRequest],
        *,
        outcome: str,
        done_url: str | None = None,
    ) -> Any:
        reviews = list(queryset.select_related("task", "work_attempt__agent"))
        form = ReviewDecisionForm(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            self._decide(
                request,
                reviews,
                outcome=outcome,
                summary=form.cleaned_data["reason"],
                findings=form.cleaned_data["findings"],
            )
            return HttpResponseRedirect(done_url) if done_url else None
        verb, _ = VERBS[outcome]
        pending = sum(1 for review in reviews if review.status in PENDING_REVIEW_STATUSES)
        confirmation = Confirmation(
            title=f"{verb} {plural(len(reviews), 'review')}",
            intro={
                ReviewOutcome.APPROVED: "Approve the work of each selected review: its task becomes done. "
                "A task or branch that moved since the request is refused and the request superseded.",
                ReviewOutcome.CHANGES_REQUESTED: "Send the work back: the task becomes ready and the next "
                "worker reads your reason and findings in its work context.",
                ReviewOutcome.BLOCKED: "Block the work: the task becomes blocked with your reason.",
            }[outcome],
            warning="" if pending == len(reviews) else "Reviews already decided are skipped.",
            danger=outcome != ReviewOutcome.APPROVED,
            submit_label=f"Yes, {verb.lower()}",
            columns=["Review", "Task", "Status", "Work by", "Version", "Head"],
            rows=[
                (
                    review,
                    [
                        review.pk,
                        review.task.key,
                        badge(review.status),
                        self.worker(review),
                        review.task_version,
                        self.head(review),
                    ],
                )
                for review in reviews
            ],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name=None if done_url else ACTION_NAMES[outcome],
            objects=reviews,
            cancel_url=done_url or reverse("admin:leases_reviewrequest_changelist"),
        )

    def _decide(
        self, request: HttpRequest, reviews: list[ReviewRequest], *, outcome: str, summary: str, findings: list[str]
    ) -> None:
        actor = actor_of(request)
        done, skipped, refused = 0, 0, []
        _, verbed = VERBS[outcome]
        for review in reviews:
            if review.status not in PENDING_REVIEW_STATUSES:
                skipped += 1
                continue
            try:
                review_decide(request=review, outcome=outcome, actor=actor, summary=summary, findings=findings)
            except LedgerError as exc:
                refused.append(f"Review {review.pk} ({review.task.key}): {exc.code}: {exc.message}")
                continue
            done += 1
            self.log_change(request, review, f"Review {verbed}: {summary[:200]}")
        self.report(
            request,
            done=f"{plural(done, 'review')} {verbed}." if done else None,
            skipped=[f"{plural(skipped, 'review')} already decided."] if skipped else [],
            refused=refused,
        )

    @admin.action(description="Approve…", permissions=["operate"])
    def approve(self, request: HttpRequest, queryset: QuerySet[ReviewRequest]) -> HttpResponse | None:
        return self._decide_flow(request, queryset, outcome=ReviewOutcome.APPROVED)

    @admin.action(description="Request changes…", permissions=["operate"])
    def request_changes(self, request: HttpRequest, queryset: QuerySet[ReviewRequest]) -> HttpResponse | None:
        return self._decide_flow(request, queryset, outcome=ReviewOutcome.CHANGES_REQUESTED)

    @admin.action(description="Block…", permissions=["operate"])
    def block(self, request: HttpRequest, queryset: QuerySet[ReviewRequest]) -> HttpResponse | None:
        return self._decide_flow(request, queryset, outcome=ReviewOutcome.BLOCKED)

    # --- the request's own page ---------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        decide = path(
            "<path:object_id>/decide/<slug:action>/",
            self.admin_site.admin_view(self.decide_view),
            name="leases_reviewrequest_decide",
        )
        return [decide, *super().get_urls()]

    def decide_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """Approve, request changes or block from the request's page: the list action's confirmation, for one."""
        outcomes = {name: outcome for outcome, name in ACTION_NAMES.items()}
        if action not in outcomes:
            raise Http404("No such decision.")
        if not self.has_operate_permission(request):
            raise PermissionDenied
        queryset = ReviewRequest.objects.filter(pk=object_id) if object_id.isdigit() else ReviewRequest.objects.none()
        if not queryset.exists():
            raise Http404("No such review request.")
        done_url = reverse("admin:leases_reviewrequest_change", args=[object_id])
        response: HttpResponse = self._decide_flow(request, queryset, outcome=outcomes[action], done_url=done_url)
        return response

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        review = (
            ReviewRequest.objects.select_related("task__project", "work_attempt__agent").filter(pk=object_id).first()
            if object_id.isdigit()
            else None
        )
        if review is not None:
            # git runs here, before the admin's changeform_view opens its transaction.
            extra.update(
                review=review,
                work=review.work_attempt,
                diff=review_diff(review),
                pending=review.status in PENDING_REVIEW_STATUSES,
                can_decide=self.has_operate_permission(request),
                decisions=[(name, VERBS[outcome][0].removesuffix(" on")) for outcome, name in ACTION_NAMES.items()],
            )
        return super().change_view(request, object_id, form_url, extra)
