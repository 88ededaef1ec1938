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

from ledger import clock


class LeaseholdAdminSite(admin.AdminSite):
    site_header = "Leasehold"
    site_title = "Leasehold admin"
    index_title = "Fleet dashboard"
    index_template = "admin/leasehold/dashboard.html"
    # The task and event lists are wide; breadcrumbs and the dashboard are the navigation.
    enable_nav_sidebar = False

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        """The app list, and above it the dashboard for anyone who may view tasks."""
        # Imported here: this module loads with INSTALLED_APPS, before the models the dashboard reads.
        from console.dashboard import CHART_DAYS, STATUS_COLUMNS, build_dashboard

        extra = dict(extra_context or {})
        if request.user.has_perm("ledger.view_task"):
            extra.update(
                dashboard=build_dashboard(now=clock.now()), status_columns=STATUS_COLUMNS, chart_days=CHART_DAYS
            )
        return super().index(request, extra)


class LeaseholdAdminConfig(AdminConfig):
    default_site = "console.site.LeaseholdAdminSite"


def install(site: admin.AdminSite) -> None:
    """Check the site is Leasehold's (`LeaseholdAdminConfig` in INSTALLED_APPS) and refuse bulk deletion."""
    if not isinstance(site, LeaseholdAdminSite):
        raise ImproperlyConfigured("Install 'console.site.LeaseholdAdminConfig' instead of django.contrib.admin.")
    if any(name == "delete_selected" for name, _ in site.actions):
        site.disable_action("delete_selected")
