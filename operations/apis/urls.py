"""The probes at the root: `/healthz` and `/readyz` (outside `/api/v1/`, no login)."""

from __future__ import annotations

from django.urls import path

from operations.apis.health import healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
]
