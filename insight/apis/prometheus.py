"""`GET /metrics`: the Prometheus text format (SPEC §18), for the bearer LEASEHOLD_METRICS_TOKEN or a staff session.

A staff session sees it under the one rule for aggregates
(`ledger.permissions.may_view`, issue 32): only a user who may view every
model the series are read from (`METRICS_MODELS`); any other staff user is
answered 403.

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

from insight.models import JobHeartbeat
from insight.prometheus import fleet_registry
from leases.models import Attempt, ProjectDailyUsage
from ledger.models import Event, Project, Task
from ledger.permissions import may_view
from push.models import WebhookDelivery
from reconciliation.models import Finding, ReconciliationRun

# Every model `insight.prometheus.fleet_registry` reads a series from.
METRICS_MODELS = (
    Project,
    Task,
    Attempt,
    Event,
    Finding,
    ReconciliationRun,
    JobHeartbeat,
    WebhookDelivery,
    ProjectDailyUsage,
)


def _allowed(request: HttpRequest) -> bool | None:
    """True: the scraper's token or a staff user who may view every model read; None: a staff user
    who may not (403); False: nobody we know (401)."""
    token: str = settings.LEASEHOLD_METRICS_TOKEN
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    if not (user is not None and user.is_active and user.is_staff):
        return False
    return True if may_view(user, *METRICS_MODELS) else None


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = _allowed(request)
    if allowed is None:
        return HttpResponse(
            "Forbidden: the metrics read models this account may not view.\n", status=403, content_type="text/plain"
        )
    if not allowed:
        response = HttpResponse(
            "Authentication required: Bearer LEASEHOLD_METRICS_TOKEN or a staff session.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="leasehold-metrics"'
        return response
    return HttpResponse(generate_latest(fleet_registry()), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("metrics", metrics_view, name="prometheus-metrics")]
