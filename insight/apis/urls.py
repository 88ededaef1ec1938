"""The insight endpoints of the agent API, included by `api.urls` under /api/v1/ (Prometheus scrapes /metrics)."""

from __future__ import annotations

from django.urls import URLPattern, path

from insight.apis.metrics import MetricsApi

urlpatterns: list[URLPattern] = [
    path("metrics/", MetricsApi.as_view(), name="metrics"),
]
