"""The lean path (issue 34, SPEC §24): the agent cycle's hot writes served below Django's full stack.

`LeanWSGIHandler` is Django's WSGI handler, except that a hot request goes
from the WSGI call straight to its view through only the middleware effects
such a request has, instead of through the eleven middleware layers and the
URL resolver. A hot request is a POST, with an `Authorization` header, no
`Cookie` header, no query string and JSON acceptable (no `Accept`, `*/*` or
`application/json`: what the agents send), to one of:

    /api/v1/claims/next/               (with or without `wait`: the long-poll parks as before)
    /api/v1/attempts/<id>/renew/
    /api/v1/attempts/<id>/notes/
    /api/v1/attempts/<id>/finish/
    /api/v1/attempts/<id>/git/
    /api/v1/runners/heartbeat/         (every 15 s from every runner: most of an idle fleet's requests)

Everything else, and every hot request while `LEASEHOLD_LEAN_PATH` is off,
goes through the full stack. The views are the ones the URLconf names (taken
from the resolver, so the route cannot drift from it), and below the view
nothing changes: DRF's dispatch, the authentication, permission and
throttle classes, the serializers, `run_mutation` and its idempotency, the
services, the envelope.

What the full stack does to such a request, and what the lean path keeps:

- `RequestLogMiddleware` (the request id, the log line) and
  `StorageDeadlineMiddleware`: the same classes, wrapped the same way.
- `SecurityMiddleware` (the HTTPS redirect and the security headers),
  `CommonMiddleware` (the Host check against `ALLOWED_HOSTS`, refused user
  agents, `Content-Length`) and `XFrameOptionsMiddleware`: the same
  instances' `process_request` / `process_response`, in the full stack's
  order, so the headers come out in the same order.
- The session and CSRF middleware: only a cookie, or the browsable API's
  HTML page (another `Accept`, or `?format=`), gives them anything to do (a
  session, a CSRF cookie to fix or a token to render), and such a request
  takes the full stack. The views are `csrf_exempt` (DRF's `as_view`), so
  `process_view` would pass them anyway; token authentication uses no CSRF.
- The session user and messages: skipped for a bearer API request in the
  full stack as well (`api.browser_only`). WhiteNoise serves /static/ only;
  django-axes acts only on a login attempt.
- An exception the view does not answer becomes Django's answer for it
  (`response_for_exception`: the envelope's 500), and a 4xx or 5xx is logged
  by `django.request`, as `BaseHandler.get_response` does.

`tests/api/test_lean_path.py` replays requests through both handlers and
compares status, headers (the `Date` aside; the handler sets none) and body.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest
from django.db import connections
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import ResolverMatch, resolve, set_urlconf
from django.utils.log import log_response

from api.base import JSON, JSON_ACCEPTS
from api.request_log import RequestLogMiddleware
from core.deadline import StorageDeadlineMiddleware

# The hot routes: (a path of the route, to find its view through the resolver; the same route's regex).
# The regexes are the URLconf's (`api.urls`' `attemptid` converter); `_hot_routes` checks that the
# resolver sends each sample path to a view under the same route, so a changed URLconf fails loudly.
ATTEMPT_ID = "(?P<attempt_id>[1-9][0-9]{0,17})"
HOT_ROUTES = (
    ("/api/v1/claims/next/", r"/api/v1/claims/next/"),
    ("/api/v1/attempts/1/renew/", rf"/api/v1/attempts/{ATTEMPT_ID}/renew/"),
    ("/api/v1/attempts/1/notes/", rf"/api/v1/attempts/{ATTEMPT_ID}/notes/"),
    ("/api/v1/attempts/1/finish/", rf"/api/v1/attempts/{ATTEMPT_ID}/finish/"),
    ("/api/v1/attempts/1/git/", rf"/api/v1/attempts/{ATTEMPT_ID}/git/"),
    ("/api/v1/runners/heartbeat/", r"/api/v1/runners/heartbeat/"),
)
Layer = Callable[[HttpRequest], Any]
# The full stack's middleware, whose effects on a hot request the lean path reproduces; with any
# other list (a setting changed, a middleware added) every request takes the full stack.
EXPECTED_MIDDLEWARE = (
    "api.request_log.RequestLogMiddleware",
    "core.deadline.StorageDeadlineMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "api.browser_only.BrowserAuthenticationMiddleware",
    "api.browser_only.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
)


class HotRoute:
    """One hot route: its regex, its view (the URLconf's own callable) and the resolver match it logs."""

    def __init__(self, sample_path: str, pattern: str) -> None:
        self.regex = re.compile(pattern)
        match = resolve(sample_path)
        self.view: Callable[..., HttpResponseBase] = match.func
        self.url_name = match.url_name
        self.route = match.route
        self.app_names = match.app_names
        self.namespaces = match.namespaces
        sample = self.regex.fullmatch(sample_path)
        if sample is None or {name: str(value) for name, value in match.kwargs.items()} != sample.groupdict():
            raise RuntimeError(f"The lean path's route {pattern!r} no longer matches the URLconf's {match.route!r}.")

    def resolver_match(self, kwargs: dict[str, Any]) -> ResolverMatch:
        return ResolverMatch(
            self.view,
            (),
            kwargs,
            url_name=self.url_name,
            app_names=list[str | None](self.app_names),
            namespaces=list[str | None](self.namespaces),
            route=self.route,
        )


def lean_path_possible() -> bool:
    """Whether the settings are the ones the lean path reproduces the full stack under."""
    return (
        tuple(settings.MIDDLEWARE) == EXPECTED_MIDDLEWARE
        and not any(connection.settings_dict.get("ATOMIC_REQUESTS") for connection in connections.all())
        and settings.FORCE_SCRIPT_NAME is None
    )


def _unused(request: HttpRequest) -> HttpResponseBase:
    raise AssertionError("the lean path calls these middleware's hooks only")


class LeanWSGIHandler(WSGIHandler):
    """Django's WSGI handler with the lean path in front of the middleware stack (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._routes: list[HotRoute] | None = None
        self._security = SecurityMiddleware(_unused)
        self._common = CommonMiddleware(_unused)
        self._xframe = XFrameOptionsMiddleware(_unused)
        # The full stack's layers that act on a hot request, outermost first, each converting an
        # exception to its answer as Django wraps every middleware (`convert_exception_to_response`).
        # (Typed loosely: django-stubs' middleware signatures disagree with each other.)
        deadline = StorageDeadlineMiddleware(cast(Layer, self._security_layer))
        self._lean_chain: Layer = convert_exception_to_response(
            RequestLogMiddleware(cast(Layer, convert_exception_to_response(deadline)))
        )
        self._below_security: Layer = convert_exception_to_response(self._common_layer)
        self._below_common: Layer = convert_exception_to_response(self._xframe_layer)

    def hot_routes(self) -> list[HotRoute]:
        # Built at the first request: the URLconf is not loaded while the handler is made.
        if self._routes is None:
            self._routes = [HotRoute(sample, pattern) for sample, pattern in HOT_ROUTES]
        return self._routes

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        meta = request.META
        if (
            request.method != "POST"
            or not meta.get("HTTP_AUTHORIZATION")
            or "HTTP_COOKIE" in meta
            or meta.get("QUERY_STRING")
            or meta.get("HTTP_ACCEPT", JSON) not in JSON_ACCEPTS
            or not request.path_info.startswith("/api/v1/")
        ):
            return super().get_response(request)
        for route in self.hot_routes():
            found = route.regex.fullmatch(request.path_info)
            if found is not None:
                break
        else:
            return super().get_response(request)
        set_urlconf(settings.ROOT_URLCONF)
        kwargs: dict[str, Any] = {name: int(value) for name, value in found.groupdict().items()}
        request.resolver_match = route.resolver_match(kwargs)
        request.lean_route = route  # type: ignore[attr-defined]
        response: Any = self._lean_chain(request)
        response._resource_closers.append(request.close)
        if response.status_code >= 400:
            log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        return response

    # Each layer as Django's `MiddlewareMixin.__call__` runs it: an answer from `process_request`
    # skips the layers below and still passes this layer's `process_response`.
    def _security_layer(self, request: HttpRequest) -> Any:
        response = self._security.process_request(request) or self._below_security(request)
        return self._security.process_response(request, response)

    def _common_layer(self, request: HttpRequest) -> Any:
        response = self._common.process_request(request) or self._below_common(request)
        return self._common.process_response(request, response)

    def _xframe_layer(self, request: HttpRequest) -> Any:
        return self._xframe.process_response(request, self._view_response(request))

    def _view_response(self, request: HttpRequest) -> Any:
        """`BaseHandler._get_response` for the route found, with the innermost layer's exception handling."""
        route: HotRoute = request.lean_route  # type: ignore[attr-defined]
        try:
            response = route.view(request, **request.resolver_match.kwargs)  # type: ignore[union-attr]
            self.check_response(response, route.view)
            render = getattr(response, "render", None)
            if callable(render):
                response = render()
        except Exception as exc:
            response = response_for_exception(request, exc)
        return response


def application_class() -> type[WSGIHandler]:
    """The WSGI handler `config.wsgi` serves: the lean one unless `LEASEHOLD_LEAN_PATH` is off."""
    if settings.LEASEHOLD_LEAN_PATH and lean_path_possible():
        return LeanWSGIHandler
    return WSGIHandler


def wsgi_application() -> WSGIHandler:
    """`config.wsgi.application`: an instance of `application_class()`."""
    return application_class()()


__all__ = ["LeanWSGIHandler", "WSGIRequest", "application_class", "lean_path_possible", "wsgi_application"]
