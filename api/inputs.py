"""What the API reads from a request and how it writes JSON: the body parser, the renderer,
query and body input through plain serializers, and opaque cursors.

DRF loads the parser and renderer from its settings while
`rest_framework.views` is still loading: this module must not import that
module, nor anything that does.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from config.errors import PayloadTooLarge, ValidationFailed

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
