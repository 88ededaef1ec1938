"""Leasehold's admin site: the standard Django admin whose index is the fleet dashboard.

`LeaseholdAdminConfig` replaces `django.contrib.admin` in INSTALLED_APPS and
makes this the default site; `console.admin` checks that it did (`install`)
before it registers every model, so a settings file that lists the plain
admin fails at start-up instead of serving a site without the dashboard.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse

from ledger import clock


class LeaseholdAdminSite(admin.AdminSite):
    site_header = "Leasehold"
    site_title = "Leasehold admin"
    index_title = "Fleet dashboard"
    index_template = "admin/leasehold/dashboard.html"
    # The task and event lists are wide; breadcrumbs and the dashboard are the navigation.
    enable_nav_sidebar = False

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        """The app list, and above it the dashboard's panels this user may see (`console.permissions`)."""
        # Imported here: this module loads with INSTALLED_APPS, before the models the dashboard reads.
        from console.fleet.dashboard import AUTO_REFRESH_SECONDS, CHART_DAYS, STATUS_COLUMNS, build_dashboard
        from console.permissions import may_see_page, visible_panels

        extra = dict(extra_context or {})
        shown = visible_panels(request)
        if shown:
            # `?refresh=30` reloads the page every 30 s (a meta refresh: no script); any other value is off.
            refresh = AUTO_REFRESH_SECONDS if request.GET.get("refresh") == str(AUTO_REFRESH_SECONDS) else None
            extra.update(
                dashboard=build_dashboard(now=clock.now(), shown=shown),
                status_columns=STATUS_COLUMNS,
                chart_days=CHART_DAYS,
                refresh_seconds=refresh,
                refresh_every=AUTO_REFRESH_SECONDS,
                jobs_url=reverse("admin:leasehold_jobs"),
                may_see_jobs=may_see_page(request, "job_health"),
                may_see_agent_health=may_see_page(request, "agent_health"),
                may_see_report=may_see_page(request, "report"),
                may_see_runners=request.user.has_perm("runners.view_runner"),
            )
        return super().index(request, extra)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        """The operations pages that belong to no single model: job health and the managers' report."""
        from console.fleet.jobs_health import jobs_page
        from console.landing.pages import landing_index, landing_page
        from console.reports.reports import attempts_csv, report_page, tasks_csv

        pages = [
            path("jobs/", self.admin_view(lambda request: jobs_page(request, self)), name="leasehold_jobs"),
            path(
                "landing/queue/",
                self.admin_view(lambda request: landing_index(request, self)),
                name="leasehold_landing_index",
            ),
            path(
                "landing/queue/<slug:slug>/",
                self.admin_view(lambda request, slug: landing_page(request, self, slug)),
                name="leasehold_landing",
            ),
            path("reports/", self.admin_view(lambda request: report_page(request, self)), name="leasehold_report"),
            path("reports/tasks.csv", self.admin_view(tasks_csv), name="leasehold_report_tasks"),
            path("reports/attempts.csv", self.admin_view(attempts_csv), name="leasehold_report_attempts"),
        ]
        return [*pages, *super().get_urls()]


class LeaseholdAdminConfig(AdminConfig):
    default_site = "console.site.LeaseholdAdminSite"


def install(site: admin.AdminSite) -> None:
    """Check the site is Leasehold's (`LeaseholdAdminConfig` in INSTALLED_APPS) and refuse bulk deletion."""
    if not isinstance(site, LeaseholdAdminSite):
        raise ImproperlyConfigured("Install 'console.site.LeaseholdAdminConfig' instead of django.contrib.admin.")
    if any(name == "delete_selected" for name, _ in site.actions):
        site.disable_action("delete_selected")
