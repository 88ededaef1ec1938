"""`GET /metrics`: the Prometheus text format (SPEC §18), for the bearer LEASEHOLD_METRICS_TOKEN or a staff session.

A plain Django view, outside the agent API (no envelope, no throttle, not
in the OpenAPI schema): Prometheus speaks neither. `GET /api/v1/metrics/`
stays what it is, the daily series the dashboard plots; this endpoint is the
point-in-time view a scraper polls. Mounted by `config.urls`.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from insight.prometheus import fleet_registry


def _allowed(request: HttpRequest) -> bool:
    token: str = settings.LEASEHOLD_METRICS_TOKEN
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = HttpResponse(
            "Authentication required: Bearer LEASEHOLD_METRICS_TOKEN or a staff session.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="leasehold-metrics"'
        return response
    return HttpResponse(generate_latest(fleet_registry()), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("metrics", metrics_view, name="prometheus-metrics")]
