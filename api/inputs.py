"""What the API reads from a request and how it writes JSON: the body parser, the renderer,
query and body input through plain serializers, and opaque cursors.

DRF loads the parser and renderer from its settings while
`rest_framework.views` is still loading: this module must not import that
module, nor anything that does.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from core.errors import PayloadTooLarge, ValidationFailed

MAX_BODY_BYTES = 256 * 1024
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


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


# DRF's format override (`?format=json`), which the browsable API uses.
ALWAYS_ALLOWED_QUERY = frozenset({"format"})


def refuse_unknown(given: Iterable[str], allowed: Iterable[str], *, where: str) -> None:
    """No input is silently ignored: a field the operation does not take is VALIDATION_ERROR naming it."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValidationFailed(
            f"Unknown {where} {'field' if len(unknown) == 1 else 'fields'}: {', '.join(unknown[:20])}.",
            details={"fields": {name: ["unknown field"] for name in unknown[:50]}},
        )


@functools.cache
def _validator(serializer_class: type[serializers.Serializer[Any]]) -> serializers.Serializer[Any]:
    """One instance of an input serializer per process, its fields built once.

    Building a serializer's fields (a deep copy of every declared field, per
    request) cost more than validating with them (issue 20, measured). Only
    `fields` and `run_validation` are used on it, and neither keeps anything
    of a request on the instance: server threads share it. Validation answers
    exactly what `is_valid(raise_exception=True)` would: that too is
    `run_validation`, its errors raised as one ValidationError.
    """
    serializer = serializer_class()
    for field in serializer.fields.values():
        field.validators  # noqa: B018 - built lazily otherwise, in the first request's thread
    return serializer


def _validated(
    serializer_class: type[serializers.Serializer[Any]], data: Any, allowed: Iterable[str], where: str
) -> dict[str, Any]:
    validator = _validator(serializer_class)
    refuse_unknown(data, {*validator.fields, *allowed}, where=where)
    return dict(validator.run_validation(data))


def query_input(
    serializer_class: type[serializers.Serializer[Any]], request: Request, *, also: Iterable[str] = ()
) -> dict[str, Any]:
    """Validate query parameters with a plain serializer; VALIDATION_ERROR otherwise.

    `also` names parameters another reader of the same request takes (a filter set).
    """
    return _validated(serializer_class, request.query_params, {*also, *ALWAYS_ALLOWED_QUERY}, "query")


def body_input(serializer_class: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    """Validate the JSON body (an object) with a plain serializer; a field it does not declare is refused."""
    data = request.data
    if not isinstance(data, Mapping):
        raise ValidationFailed("The request body must be a JSON object.")
    return _validated(serializer_class, data, (), "body")


class PageQuery(serializers.Serializer[Any]):
    cursor = serializers.CharField(required=False, max_length=300, help_text="`next_cursor` of the previous page.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE)


def _storable(value: Any) -> bool:
    """A cursor value the database can compare: text must be valid UTF-8 (no lone surrogate)."""
    if not isinstance(value, str):
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        and all(_storable(value) for value in position.values())
    )
    if not valid:
        raise ValidationFailed(
            "The cursor is not valid; use next_cursor as given.", details={"fields": {"cursor": ["invalid"]}}
        )
    assert isinstance(position, dict)
    return position
