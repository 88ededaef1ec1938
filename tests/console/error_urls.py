"""The project's URLs plus a view that raises: the 500 page's test (tests/console/test_error_pages.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.urls import handler400, handler403, handler404, handler500, urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a console view")


urlpatterns = [path("admin/broken/", broken), *urlpatterns]  # type: ignore[list-item]
