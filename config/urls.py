"""Root URLs: the admin at /admin/, the agent API at /api/v1/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path

from ledger.api_base import NotFoundApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(("leases.api_urls", "api"), namespace="api")),
    # Any other path under /api/ answers in the API's error envelope too.
    re_path(r"^api/", NotFoundApi.as_view()),
]

# Django-level errors (outside DRF views) under /api/ get the envelope as well.
handler400 = "config.api.handler400"
handler403 = "config.api.handler403"
handler404 = "config.api.handler404"
handler500 = "config.api.handler500"
