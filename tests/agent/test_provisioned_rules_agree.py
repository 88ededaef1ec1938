"""The runner checks what a provider's `provision` printed (agent/runner/provider_commands.py)
before it reports it; the server checks the report again (leases/services/provisioning.py). The
agent may not import the server, so the two rules are kept in step by hand: this table pins them
together — every value is accepted by both or refused by both.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.runner.provider_commands import ProviderError, provisioned_from
from core.errors import ValidationFailed
from leases.services.provisioning import provisioned_values

VALUES: list[tuple[str, Any, bool]] = [
    ("database_url", "postgres://app@127.0.0.1:5432/sandbox_7", True),
    ("database_url", "sqlite:///tmp/x.db", True),
    ("database_url", "postgres://app:secret@db/sandbox", False),  # a password
    ("database_url", "no-scheme", False),
    ("database_url", "postgres://db/x\nEVIL=1", False),  # a control character
    ("database_url", "postgres://db/" + "x" * 2000, False),  # too long
    ("database_url", 42, False),
    ("container", "sandbox-7", True),
    ("container", " leading-space", False),
    ("container", "tab\there", False),
    ("container", "c" * 201, False),
    ("host_path", "/srv/sandboxes/7", True),
    ("host_path", "relative/path", False),
    ("host_path", "/srv/\x00nul", False),
    ("ports", [5432, 8080], True),
    ("ports", [], True),
    ("ports", [0], False),
    ("ports", [65536], False),
    ("ports", [True], False),
    ("ports", ["80"], False),
    ("ports", list(range(1, 34)), False),  # more than 32
    ("ports", 80, False),
    ("unknown_field", "x", False),
]


def _server_accepts(name: str, value: Any) -> bool:
    try:
        provisioned_values({name: value})
    except ValidationFailed:
        return False
    return True


def _runner_accepts(name: str, value: Any) -> bool:
    try:
        provisioned_from(json.dumps({name: value}))
    except ProviderError:
        return False
    return True


@pytest.mark.parametrize(("name", "value", "accepted"), VALUES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(VALUES)])
def test_the_runner_and_the_server_agree_on_a_provisioned_value(name: str, value: Any, accepted: bool) -> None:
    assert _server_accepts(name, value) is accepted
    assert _runner_accepts(name, value) is accepted
