"""Reconciliation runs: a read-only record of each run (incremental or `--full`), its counts and its errors."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import EstimatedCountMixin, ReadOnlyAdmin, badge
from reconciliation.models import ReconciliationRun


class ReconciliationRunAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = ["id", "started_at", "finished_at", "status_badge", "full", "opened", "resolved", "error_count"]
    list_filter = ["status", "full"]
    ordering = ["-id"]
    readonly_fields = (
        "started_at",
        "finished_at",
        "status_badge",
        "full",
        "opened",
        "resolved",
        "counts_json",
        "errors_json",
    )
    fields = readonly_fields

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: ReconciliationRun) -> SafeString:
        colors = {"succeeded": "completed", "partial": "warn", "failed": "error", "running": "active"}
        return badge(colors.get(run.status, run.status), run.get_status_display())

    @admin.display(description="errors")
    def error_count(self, run: ReconciliationRun) -> int:
        return len(run.errors or [])

    @admin.display(description="findings per condition")
    def counts_json(self, run: ReconciliationRun) -> SafeString:
        return format_html('<pre class="lh-mono">{}</pre>', json.dumps(run.counts, indent=2, sort_keys=True))

    @admin.display(description="errors")
    def errors_json(self, run: ReconciliationRun) -> SafeString:
        return format_html('<pre class="lh-mono">{}</pre>', json.dumps(run.errors, indent=2, ensure_ascii=False))
