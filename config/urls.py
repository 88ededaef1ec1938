"""Root URLs: the admin at /admin/, the agent API at /api/v1/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
