"""The tools' input schemas, slimmed to keep `tools/list` under 8 KB (`tests/agent/test_mcp.py` pins its size)."""

from __future__ import annotations

from typing import Any


def slim_schema(schema: Any) -> Any:
    """The schema without titles, and `X | None = None` shown as plain `X` (it may be left out)."""
    if isinstance(schema, list):
        return [slim_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    # `additionalProperties: true` is JSON Schema's default, and a flag left out is false, text
    # left out empty: saying so costs bytes of the 8 KB.
    slimmed = {
        name: slim_schema(value)
        for name, value in schema.items()
        if name != "title"
        and not (name == "additionalProperties" and value is True)
        and not (name == "default" and (value is False or value == "") and schema.get("type") in ("boolean", "string"))
    }
    variants = slimmed.get("anyOf")
    if isinstance(variants, list) and {"type": "null"} in variants and slimmed.get("default", ...) is None:
        others = [variant for variant in variants if variant != {"type": "null"}]
        if len(others) == 1:
            slimmed.pop("anyOf")
            slimmed.pop("default")
            slimmed = {**others[0], **slimmed}
    return slimmed
