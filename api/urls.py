"""URLs of the agent API, mounted at /api/ by the root URLconf; the endpoints live at /api/v1/ (SPEC §8).

Each app lists its own endpoints (`<app>/apis/urls.py`); this module
registers the path converters they use, includes them, and answers every
other path under /api/ with the error envelope.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api.base import NotFoundApi


class TaskKeyConverter:
    """`WEB-412`. Anything else never reaches a view (it is NOT_FOUND)."""

    regex = "[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class AttemptIdConverter:
    """A positive id that fits a 64-bit column: no sign, no leading zero, at most 18 digits."""

    regex = "[1-9][0-9]{0,17}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


# Registered before the apps' URL lists are included: their routes name these converters.
register_converter(TaskKeyConverter, "taskkey")
register_converter(AttemptIdConverter, "attemptid")

version_1: list[URLPattern | URLResolver] = [
    path("", include("ledger.apis.urls")),
    path("", include("leases.apis.urls")),
    path("", include("landing.apis.urls")),
    path("", include("runners.apis.urls")),
    path("", include("insight.apis.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^.*$", NotFoundApi.as_view(), name="not-found"),
]

urlpatterns = [
    path("v1/", include(version_1)),
    # Any other path under /api/ answers in the API's error envelope too.
    re_path(r"^", NotFoundApi.as_view()),
]
