"""The managers' report (`/admin/reports/`) and its CSV exports of tasks and attempts.

The page: throughput, lead time (ready → done), failure reasons by agent and
by task class over a chosen range of UTC days, with the pooled orphan rate
(`insight.reports.fleet_report`). The exports (`tasks.csv`, `attempts.csv`)
stream (`console.reports.exports`); tasks may be filtered by project and status,
attempts by project and the same range (on their finish, or their claim for
live ones). Anyone who may view tasks may read and export: Managers included.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import reverse

from console.audit.alerts import human_duration
from console.permissions import may_see_page
from console.reports.exports import ATTEMPT_COLUMNS, TASK_COLUMNS, attempt_rows, csv_download, csv_lines, task_rows
from core.errors import LedgerError
from insight.reports import MAX_RANGE_DAYS, Breakdown, Report, fleet_report, report_range
from leases.models import Attempt
from ledger import clock
from ledger.models import Project, Task, TaskStatus


class RangeForm(forms.Form):
    since = forms.DateField(required=False, label="From (UTC day)", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To (UTC day)", widget=forms.DateInput(attrs={"type": "date"}))
    project = forms.ModelChoiceField(
        queryset=Project.objects.order_by("slug"), required=False, empty_label="All projects"
    )
    status = forms.ChoiceField(choices=[("", "Any status"), *TaskStatus.choices], required=False, label="Task status")


def _require_view(request: HttpRequest, page: str) -> None:
    """The one rule for aggregates (`console.permissions`): every model the page reads, or 403."""
    if not may_see_page(request, page):
        raise PermissionDenied


def _range(form: RangeForm, today: date) -> tuple[date, date]:
    data = form.cleaned_data if form.is_valid() else {}
    return report_range(data.get("since"), data.get("until"), today=today)


def _hours(seconds: float | None) -> str:
    return human_duration(seconds) if seconds is not None else "—"


def _rows(rows: list[Breakdown]) -> list[dict[str, Any]]:
    return [
        {
            "name": row.name,
            "completed": row.completed,
            "failed": row.failed,
            "expired": row.expired,
            "revoked": row.revoked,
            "median_text": _hours(row.lead_median),
            "p90_text": _hours(row.lead_p90),
            "reasons": row.reason_list,
        }
        for row in rows
    ]


def _orphan_text(report: Report | None) -> str:
    if report is None or report.orphan_rate is None:
        return "—"
    rate = f"{report.orphan_rate * 100:.1f} %"
    return f"{rate} ({report.orphans} orphan branches / {report.finished} attempts finished)"


def report_page(request: HttpRequest, site: Any) -> TemplateResponse:
    _require_view(request, "report")
    now = clock.now()
    today = now.astimezone(UTC).date()
    form = RangeForm(request.GET or None)
    error = ""
    report: Report | None = None
    try:
        first, last = _range(form, today)
        project = form.cleaned_data.get("project") if form.is_valid() else None
        report = fleet_report(first=first, last=last, project=project)
    except LedgerError as exc:
        error = exc.message
        first, last = today - timedelta(days=29), today
    query = request.GET.urlencode()
    context = {
        **site.each_context(request),
        "title": "Fleet report",
        "form": form,
        "error": error,
        "report": report,
        "first": first,
        "last": last,
        "max_days": MAX_RANGE_DAYS,
        "tables": [("By agent", _rows(report.by_agent)), ("By task class", _rows(report.by_class))] if report else [],
        "lead_total": _hours(report.total.lead_median) if report else "—",
        "tasks_csv": reverse("admin:leasehold_report_tasks") + (f"?{query}" if query else ""),
        "attempts_csv": reverse("admin:leasehold_report_attempts") + (f"?{query}" if query else ""),
        "orphan_rate_text": _orphan_text(report),
    }
    return TemplateResponse(request, "admin/leasehold/report.html", context)


def tasks_csv(request: HttpRequest) -> HttpResponseBase:
    _require_view(request, "tasks_csv")
    form = RangeForm(request.GET or None)
    tasks = Task.objects.order_by("id")
    if form.is_valid():
        if form.cleaned_data.get("project"):
            tasks = tasks.filter(project=form.cleaned_data["project"])
        if form.cleaned_data.get("status"):
            tasks = tasks.filter(status=form.cleaned_data["status"])
    return csv_download(csv_lines(TASK_COLUMNS, task_rows(tasks, now=clock.now())), name="tasks")


def attempts_csv(request: HttpRequest) -> HttpResponseBase:
    _require_view(request, "attempts_csv")
    form = RangeForm(request.GET or None)
    today = clock.now().astimezone(UTC).date()
    try:
        first, last = _range(form, today)
    except LedgerError:
        first, last = today - timedelta(days=29), today
    start = datetime.combine(first, time.min, tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC)
    in_range = Q(finished_at__gte=start, finished_at__lt=end) | Q(finished_at__isnull=True, claimed_at__lt=end)
    attempts = Attempt.objects.filter(in_range).order_by("id")
    if form.is_valid() and form.cleaned_data.get("project"):
        attempts = attempts.filter(task__project=form.cleaned_data["project"])
    return csv_download(csv_lines(ATTEMPT_COLUMNS, attempt_rows(attempts)), name="attempts")
