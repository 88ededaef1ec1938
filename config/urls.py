"""Root URLs: the admin at /admin/, the agent API under /api/ (its endpoints at /api/v1/), the probes.

Every app is named by a dotted string, so the ground floor imports none of them.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # /api/v1/ and, for any other path under /api/, the API's error envelope too.
    path("api/", include(("api.urls", "api"), namespace="api")),
    # /healthz and /readyz for load balancers and orchestrators (no login).
    path("", include("operations.apis.urls")),
    # Prometheus' scrape endpoint (SPEC §18), outside the agent API.
    path("", include("insight.apis.prometheus")),
]

# Django-level errors (outside DRF views) under /api/ get the envelope as well.
handler400 = "api.errors.handler400"
handler403 = "api.errors.handler403"
handler404 = "api.errors.handler404"
handler500 = "api.errors.handler500"
