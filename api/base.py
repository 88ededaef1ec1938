"""The base classes of the API's views, the catch-all for unknown paths, and `route`.

Kept apart from the modules DRF imports from its settings (`api.auth`,
`api.inputs`, `api.errors`), which must not import `rest_framework.views`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from api.inputs import MAX_BODY_BYTES
from core.errors import NotFound, PayloadTooLarge

JSON = "application/json"
# What agents send (or nothing): DRF's negotiation would answer JSON to these anyway, after
# parsing the header against every renderer (issue 20, measured: ~20 µs a request).
JSON_ACCEPTS = frozenset({"*/*", JSON})


class ApiView(APIView):
    # Base of every API view: the body limit is checked before anything is read.
    # (A comment, not a docstring: drf-spectacular would use it for every view.)

    user_permission: ClassVar[str | None] = None
    # What an attempt token (SPEC §23.2) may call here: "attempt" (its own attempt, by the URL's
    # attempt id), "task" (reads of its task, by the URL's key) or nothing (None).
    attempt_scope: ClassVar[str | None] = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY_BYTES:
            raise PayloadTooLarge(
                f"The request body is larger than {MAX_BODY_BYTES} bytes.", details={"max_bytes": MAX_BODY_BYTES}
            )
        super().initial(request, *args, **kwargs)

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[BaseRenderer, str]:
        accept = request.META.get("HTTP_ACCEPT")
        if (
            (accept is None or accept in JSON_ACCEPTS)
            and getattr(self, "format_kwarg", None) is None
            and "format" not in request.GET
        ):
            renderer = self.get_renderers()[0]
            if renderer.media_type == JSON:
                return renderer, JSON
        return super().perform_content_negotiation(request, force)


class NotFoundApi(APIView):
    """Every unknown path under /api/: the envelope, not Django's HTML page."""

    authentication_classes = ()
    permission_classes = ()
    schema = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        hint = ""
        if not request.path.endswith("/"):
            hint = f" API paths end with a slash: try {request.path}/."
        self.args, self.kwargs = args, kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            self.perform_content_negotiation(drf_request, force=True)
            raise NotFound(f"No API endpoint at {request.path}.{hint}")
        except Exception as exc:
            response = self.handle_exception(exc)
        self.response = self.finalize_response(drf_request, response, *args, **kwargs)
        return self.response


def route(**views: type[APIView]) -> Callable[..., HttpResponse]:
    """One URL, one APIView per HTTP method: `route(get=TaskDetailApi, patch=TaskUpdateApi)`.

    Keeps "one APIView per operation" where SPEC §8 puts two operations on one
    path. The schema generator expands the route back into its views
    (`expand_routes`).
    """
    callbacks = {method.upper(): view.as_view() for method, view in views.items()}
    if "GET" in callbacks:
        callbacks.setdefault("HEAD", callbacks["GET"])
    allowed = ", ".join([*callbacks, "OPTIONS"])
    fallback = next(iter(callbacks.values()))

    def dispatch(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = callbacks.get(request.method or "", fallback)(request, *args, **kwargs)
        response["Allow"] = allowed
        return response

    stub = type("RoutedApi", (APIView,), {method: APIView.http_method_not_allowed for method in views})
    dispatch.cls = stub  # type: ignore[attr-defined]
    dispatch.initkwargs = {}  # type: ignore[attr-defined]
    dispatch.routes = {method.upper(): callbacks[method.upper()] for method in views}  # type: ignore[attr-defined]
    dispatch.csrf_exempt = True  # type: ignore[attr-defined]
    return dispatch
