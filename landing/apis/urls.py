from __future__ import annotations

from django.urls import path

from landing.apis.checks import CheckReportApi, TaskChecksApi
from landing.apis.landings import (
    LandingFinishApi,
    LandingNextApi,
    LandingReleaseApi,
    LandingRenewApi,
    ProjectLandingApi,
)

urlpatterns = [
    path("checks/", CheckReportApi.as_view(), name="checks"),
    path("tasks/<taskkey:key>/checks/", TaskChecksApi.as_view(), name="task-checks"),
    path("landings/next/", LandingNextApi.as_view(), name="landing-next"),
    path("landings/<attemptid:landing_id>/renew/", LandingRenewApi.as_view(), name="landing-renew"),
    path("landings/<attemptid:landing_id>/finish/", LandingFinishApi.as_view(), name="landing-finish"),
    path("landings/<attemptid:landing_id>/release/", LandingReleaseApi.as_view(), name="landing-release"),
    path("projects/<slug:slug>/landing/", ProjectLandingApi.as_view(), name="project-landing"),
]
