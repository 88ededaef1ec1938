"""Placeholder; replaced below."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse


def report_page(request: HttpRequest, site: Any) -> HttpResponse:
    raise NotImplementedError
