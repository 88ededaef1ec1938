"""One error envelope for every API answer (SPEC §8): `{"error": {code, message, retryable, details}}`.

Any exception — ours (`core.errors.LedgerError`), DRF's or Django's —
becomes a LedgerError here, so a client parses one shape and a bad input is
never a 500. DRF loads `exception_handler` from its settings while
`rest_framework.views` is still loading: this module must not import that
module, nor anything that does.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, InternalError, OperationalError, ProgrammingError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, UnreadablePostError
from django.utils.html import escape
from rest_framework import exceptions as drf
from rest_framework.response import Response

from api.auth import BEARER_REALM
from api.inputs import MAX_BODY_BYTES
from core.db import is_connection_loss, is_storage_fault, is_transient_lock_error
from core.errors import (
    AuthenticationFailed,
    LedgerError,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    StorageBusy,
    UnsupportedMediaType,
    ValidationFailed,
)

logger = logging.getLogger("leasehold.api")

MAX_MESSAGE_CHARS = 1000
MAX_DETAILS_BYTES = 4096
# A full disk fails every write until someone frees space: one log line per minute of it says so,
# where a traceback per request would fill what little is left.
STORAGE_FAULT_LOG_SECONDS = 60.0


class _StorageFaultLog:
    """Logs the first storage fault of a burst in one line, then one line a minute with how many followed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._since = 0

    def record(self, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            if self._logged_at is not None and now - self._logged_at < STORAGE_FAULT_LOG_SECONDS:
                self._since += 1
                return
            since, self._since, self._logged_at = self._since, 0, now
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        suffix = f" ({since} more since the last report)" if since else ""
        logger.warning("storage fault, answered STORAGE_BUSY: %s%s", first_line[:300], suffix)


storage_fault_log = _StorageFaultLog()


def _plain(value: Any) -> Any:
    """DRF error details (ErrorDetail, ReturnDict, nested) as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def _bounded_details(details: dict[str, Any]) -> dict[str, Any]:
    """Details stay small: an error must not echo a huge input back."""
    if len(json.dumps(details, default=str)) <= MAX_DETAILS_BYTES:
        return details
    fields = details.get("fields")
    if isinstance(fields, dict):
        names = sorted(fields)[:50]
        return {"fields": {name: ["invalid"] for name in names}, "truncated": True}
    return {"truncated": True}


def _field_errors(detail: Any) -> dict[str, Any]:
    plain = _plain(detail)
    if isinstance(plain, dict):
        return plain
    return {"non_field_errors": plain if isinstance(plain, list) else [plain]}


def _summary(errors: dict[str, Any]) -> str:
    parts = []
    for name, messages in list(errors.items())[:5]:
        first = messages
        while isinstance(first, list | dict) and first:
            first = first[0] if isinstance(first, list) else next(iter(first.values()))
        parts.append(f"{name}: {first}")
    return "; ".join(parts) or "The request is not valid."


def as_ledger_error(exc: BaseException) -> tuple[LedgerError, dict[str, str]]:
    """Map any exception to a LedgerError and extra response headers."""
    if isinstance(exc, LedgerError):
        return exc, {}
    if isinstance(exc, drf.Throttled):
        wait = getattr(exc, "wait", None) or 1
        return RateLimited(details={"retry_after_seconds": math.ceil(wait)}), {"Retry-After": str(math.ceil(wait))}
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return AuthenticationFailed(str(exc.detail)), {}
    if isinstance(exc, drf.PermissionDenied | DjangoPermissionDenied):
        message = str(exc.detail) if isinstance(exc, drf.APIException) else (str(exc) or None)
        return PermissionDenied(message), {}
    if isinstance(exc, drf.NotFound | Http404):
        return NotFound(), {}
    if isinstance(exc, drf.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail)), {}
    if isinstance(exc, drf.NotAcceptable):
        return NotAcceptable(), {}
    if isinstance(exc, drf.UnsupportedMediaType):
        return UnsupportedMediaType(str(exc.detail)), {}
    if isinstance(exc, drf.ParseError):
        return ValidationFailed(f"The request body is not valid JSON: {exc.detail}"), {}
    if isinstance(exc, drf.ValidationError):
        errors = _field_errors(exc.detail)
        return ValidationFailed(_summary(errors), details={"fields": errors}), {}
    if isinstance(exc, DjangoValidationError):
        errors = _field_errors(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
        return ValidationFailed(_summary(errors), details={"fields": errors}), {}
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(details={"max_bytes": MAX_BODY_BYTES}), {}
    if isinstance(exc, UnreadablePostError):
        # The body did not arrive by its deadline (config/gunicorn.py), or the client went away.
        return ValidationFailed("The request body did not arrive in time."), {}
    if isinstance(exc, SuspiciousOperation):
        return ValidationFailed("The request was refused as malformed."), {}
    if isinstance(exc, OperationalError) and is_transient_lock_error(exc):
        return StorageBusy(), {}
    if is_storage_fault(exc):
        # Disk full, an I/O error: nothing of this request committed, and it may succeed later.
        storage_fault_log.record(exc)
        return StorageBusy("The database cannot store this now (disk full or a storage error); retry later."), {}
    if is_connection_loss(exc):
        # A restart, a failover, a dropped pooled connection: nothing of this
        # request committed that the caller was told of; retrying is safe.
        logger.warning("database connection lost: %s", exc)
        return StorageBusy("The database connection was lost; retry."), {}
    if isinstance(exc, UnicodeError):
        return ValidationFailed("The request holds text that is not valid Unicode (a lone surrogate?)."), {}
    if isinstance(exc, InternalError | ProgrammingError):
        # What user-shaped input can still provoke past validation (e.g. a
        # query PostgreSQL's parser gives up on). Logged in full: if it is a
        # bug instead, the log says so.
        logger.error("the database refused the request's input", exc_info=exc)
        return ValidationFailed("The database could not process this input."), {}
    if isinstance(exc, DataError | OverflowError):
        # Input that slipped past validation (a number out of the column's
        # range, a character the database cannot store): still the caller's.
        logger.warning("value refused by the database: %s", exc)
        return ValidationFailed("A value is out of range or cannot be stored."), {}
    if isinstance(exc, drf.APIException) and exc.status_code < 500:
        by_status = {401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound}
        return by_status.get(exc.status_code, ValidationFailed)(str(exc.detail)), {}
    logger.error("unhandled exception in the API", exc_info=exc)
    return LedgerError("Internal error; it has been logged."), {}


def envelope(error: LedgerError) -> dict[str, Any]:
    body = error.as_dict()
    message = str(body["message"])
    body["message"] = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"
    body["details"] = _bounded_details(_plain(body["details"]))
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every error, ours or DRF's or Django's, in one envelope."""
    error, headers = as_ledger_error(exc)
    if error.http_status == 401:
        headers["WWW-Authenticate"] = BEARER_REALM
    return Response(envelope(error), status=error.http_status, headers=headers)


def _django_envelope(request: HttpRequest, error: LedgerError) -> HttpResponse | None:
    if not request.path.startswith("/api/"):
        return None
    return JsonResponse(envelope(error), status=error.http_status)


# The HTML side of the same errors (issue 32): a styled page of the console, with the request id.
ERROR_PAGES: dict[int, tuple[str, str]] = {
    400: ("Bad request", "The request could not be understood; it was refused as malformed."),
    403: ("Permission denied", "Your account may not open this page or do this action."),
    404: ("Page not found", "There is nothing at this address. It may have moved, or the link is wrong."),
    500: ("Server error", "Something went wrong on the server; the error has been logged."),
}
ERROR_TEMPLATE = "admin/leasehold/error.html"


def _bare_error_page(status: int, request_id: str) -> HttpResponse:
    """The page when the styled one cannot be drawn (the database is down, a template fails): still the id."""
    title, explanation = ERROR_PAGES[status]
    body = (
        f'<!doctype html><html lang="en"><head><title>{title} | Leasehold</title></head><body>'
        f"<h1>{title}</h1><p>{explanation}</p>"
        f'<p>Request id: <code class="lh-request-id">{escape(request_id)}</code></p>'
        '<p><a href="/admin/">Back to the fleet dashboard</a></p></body></html>'
    )
    return HttpResponse(body, status=status)


def error_page(request: HttpRequest, status: int) -> HttpResponse:
    """The console's error page: the admin's chrome (header, user tools, breadcrumbs) and the request id."""
    request_id = str(getattr(request, "request_id", ""))
    title, explanation = ERROR_PAGES[status]
    if not hasattr(request, "user"):
        # Refused before the middleware that knows the user ran (a bad Host header): the admin's chrome
        # needs the user, and a client's mistake is not worth a traceback in the operator's log.
        return _bare_error_page(status, request_id)
    try:
        # Imported here: DRF loads this module early (see the module's docstring).
        from django.contrib import admin
        from django.template import loader

        context = {
            **admin.site.each_context(request),
            "title": title,
            "explanation": explanation,
            "request_id": request_id,
        }
        return HttpResponse(loader.render_to_string(ERROR_TEMPLATE, context, request=request), status=status)
    except Exception:  # an error page must not fail in turn
        logger.exception("the styled %s page could not be drawn", status)
        return _bare_error_page(status, request_id)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django-level errors under /api/ (outside any DRF view) still get the envelope."""
    error = as_ledger_error(exception)[0] if exception is not None else ValidationFailed()
    if error.http_status >= 500:
        error = ValidationFailed()
    return _django_envelope(request, error) or error_page(request, 400)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _django_envelope(request, PermissionDenied()) or error_page(request, 403)


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _django_envelope(request, NotFound()) or error_page(request, 404)


def handler500(request: HttpRequest) -> HttpResponse:
    return _django_envelope(request, LedgerError("Internal error; it has been logged.")) or error_page(request, 500)
