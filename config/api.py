"""DRF glue for the agent API (SPEC §8): one error envelope, authentication, body limits,
cursors and the idempotency plumbing.

Everything an API view needs that is not a business rule lives here; the
rules live in the services. DRF imports this module from its settings
(authentication, permission, parser, renderer classes) while
`rest_framework.views` is still loading, so it must not import that module,
nor anything that does (the view base classes live in `ledger.api_base`).
Domain modules are imported lazily, inside functions, for the same reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults as django_defaults
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import JSONParser
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from config.db import is_transient_lock_error
from config.errors import (
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
from ledger.actors import Actor

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from ledger.models import Agent

logger = logging.getLogger("leasehold.api")

MAX_BODY_BYTES = 256 * 1024
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_MESSAGE_CHARS = 1000
MAX_DETAILS_BYTES = 4096
BEARER_REALM = 'Bearer realm="leasehold"'


# --- the envelope -----------------------------------------------------------------


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
    if isinstance(exc, SuspiciousOperation):
        return ValidationFailed("The request was refused as malformed."), {}
    if isinstance(exc, OperationalError) and is_transient_lock_error(exc):
        return StorageBusy(), {}
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


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django-level errors under /api/ (outside any DRF view) still get the envelope."""
    error = as_ledger_error(exception)[0] if exception is not None else ValidationFailed()
    if error.http_status >= 500:
        error = ValidationFailed()
    return _django_envelope(request, error) or django_defaults.bad_request(request, exception or Exception())


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _django_envelope(request, PermissionDenied()) or django_defaults.permission_denied(
        request, exception or Exception()
    )


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _django_envelope(request, NotFound()) or django_defaults.page_not_found(request, exception or Http404())


def handler500(request: HttpRequest) -> HttpResponse:
    return _django_envelope(
        request, LedgerError("Internal error; it has been logged.")
    ) or django_defaults.server_error(request)


# --- parsing and rendering --------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonBodyParser(JSONParser):
    """JSON only, at most MAX_BODY_BYTES, strict (no NaN), never a 500 on odd input."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_BODY_BYTES:
            raise PayloadTooLarge(
                f"The request body is larger than {MAX_BODY_BYTES} bytes.", details={"max_bytes": MAX_BODY_BYTES}
            )
        try:
            return json.loads(raw.decode(encoding), parse_constant=_refuse_constant)
        except (ValueError, RecursionError, LookupError) as exc:
            raise drf.ParseError(str(exc)[:200]) from None


class JsonRenderer(JSONRenderer):
    """Compact UTF-8 JSON; falls back to ASCII escapes for text UTF-8 cannot carry (lone surrogates)."""

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return json.dumps(data, cls=JSONEncoder, ensure_ascii=True, separators=(",", ":")).encode()


# --- who is calling -----------------------------------------------------------------


class AgentPrincipal:
    """`request.user` for an agent token: authenticated, never staff."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.pk = agent.pk

    def __str__(self) -> str:
        return self.agent.handle

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False


class AgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <agent token>`, checked against the stored SHA-256."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise drf.AuthenticationFailed("Use 'Authorization: Bearer <agent token>'.")
        from ledger.selectors import agent_for_token

        agent = agent_for_token(token)
        if agent is None:
            raise drf.AuthenticationFailed("The agent token is not valid, or its agent is deactivated.")
        return AgentPrincipal(agent), agent

    def authenticate_header(self, request: Request) -> str:
        return BEARER_REALM


class IsAgentOrStaff(BasePermission):
    """Agents (scoped by their projects in every view), or staff users.

    A user's write also needs the Django permission the view names in
    `user_permission`: the read-only Managers group cannot write through the API.
    """

    message = "Only agents and staff users may use the API."

    def has_permission(self, request: Request, view: Any) -> bool:
        user: Any = request.user
        if isinstance(user, AgentPrincipal):
            return True
        if user is None or not user.is_authenticated or not user.is_staff:
            return False
        needed = getattr(view, "user_permission", None)
        if request.method not in SAFE_METHODS and needed and not user.has_perm(needed):
            self.message = f"Your account lacks the permission {needed}."
            return False
        return True


@dataclass(frozen=True)
class Caller:
    agent: Agent | None
    user: AbstractBaseUser | None

    @property
    def actor(self) -> Actor:
        return Actor(agent=self.agent) if self.agent is not None else Actor(user=self.user)

    def require_agent(self) -> Agent:
        if self.agent is None:
            raise PermissionDenied("Only an agent (bearer token) can hold leases; staff users cannot.")
        return self.agent


def caller_of(request: Request) -> Caller:
    user: Any = request.user
    if isinstance(user, AgentPrincipal):
        return Caller(agent=user.agent, user=None)
    return Caller(agent=None, user=user)


# --- query input ----------------------------------------------------------------------


def query_input(serializer_class: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    """Validate query parameters with a plain serializer; VALIDATION_ERROR otherwise."""
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def body_input(serializer_class: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    """Validate the JSON body (an object) with a plain serializer."""
    data = request.data
    if not isinstance(data, Mapping):
        raise ValidationFailed("The request body must be a JSON object.")
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class PageQuery(serializers.Serializer[Any]):
    cursor = serializers.CharField(required=False, max_length=300, help_text="`next_cursor` of the previous page.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE)


# --- cursors --------------------------------------------------------------------------


def encode_cursor(position: Mapping[str, Any]) -> str:
    text = json.dumps(position, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str, *, expected: Mapping[str, type]) -> dict[str, Any]:
    """The position a cursor encodes; VALIDATION_ERROR for anything this API did not hand out."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        position = None
    valid = (
        isinstance(position, dict)
        and set(position) == set(expected)
        and all(
            isinstance(position[name], kind) and not isinstance(position[name], bool) for name, kind in expected.items()
        )
    )
    if not valid:
        raise ValidationFailed(
            "The cursor is not valid; use next_cursor as given.", details={"fields": {"cursor": ["invalid"]}}
        )
    assert isinstance(position, dict)
    return position


# --- idempotency plumbing ---------------------------------------------------------------

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,128}$")
FINGERPRINTED_HEADERS = ("HTTP_IF_MATCH", "HTTP_X_ATTEMPT_ID", "HTTP_X_LEASE_EPOCH", "HTTP_X_LEASE_TOKEN")


@dataclass(frozen=True)
class Outcome:
    """What a mutating view's work produced. `attempt_id` names the attempt whose
    lease token the body carries under `lease_token` (claims)."""

    status: int
    data: Any = None
    attempt_id: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


def to_native(data: Any) -> Any:
    """The data exactly as the renderer will see it, so a replay renders the same bytes."""
    if data is None:
        return None
    return json.loads(json.dumps(data, cls=JSONEncoder, ensure_ascii=True))


def request_fingerprint(request: Request) -> str:
    """SHA-256 of what makes two requests "the same": method, path, body, lease and version headers."""
    digest = hashlib.sha256()
    digest.update(f"{request.method}\n{request.get_full_path()}\n".encode())
    data = request.data
    body = data.dict() if hasattr(data, "dict") else data
    digest.update(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())
    for name in FINGERPRINTED_HEADERS:
        digest.update(f"\n{name}={request.META.get(name, '')}".encode("utf-8", errors="surrogateescape"))
    return digest.hexdigest()


def _response(outcome: Outcome, *, replayed: bool) -> Response:
    response = Response(outcome.data, status=outcome.status, headers=outcome.headers)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def run_mutation(request: Request, work: Callable[[], Outcome]) -> Response:
    """Run a mutating operation, under the caller's `Idempotency-Key` when one is sent.

    Same key, same request → the stored status and body, without doing the
    work again; same key, another request → IDEMPOTENCY_CONFLICT. See
    `leases.idempotency` for how duplicates racing each other do the work once.
    """
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        outcome = work()
        return _response(replace_data(outcome, to_native(outcome.data)), replayed=False)
    if not IDEMPOTENCY_KEY.match(key):
        raise ValidationFailed(
            "Idempotency-Key must be 1 to 128 visible ASCII characters.",
            details={"fields": {"Idempotency-Key": ["1-128 visible ASCII characters"]}},
        )
    agent = caller_of(request).agent
    if agent is None:
        raise ValidationFailed("Idempotency-Key is kept per agent; staff users cannot send one.")
    from leases.idempotency import StoredOutcome, idempotent_call

    def native_work() -> StoredOutcome:
        outcome = work()
        return StoredOutcome(status=outcome.status, data=to_native(outcome.data), attempt_id=outcome.attempt_id)

    result = idempotent_call(
        agent=agent, key=key, fingerprint=request_fingerprint(request), work=native_work, refusal_body=envelope
    )
    return _response(Outcome(status=result.status, data=result.data), replayed=result.replayed)


def replace_data(outcome: Outcome, data: Any) -> Outcome:
    return Outcome(status=outcome.status, data=data, attempt_id=outcome.attempt_id, headers=outcome.headers)
