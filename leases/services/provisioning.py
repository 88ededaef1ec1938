"""What an environment provider made for an attempt, recorded on its allocation (SPEC §23.3).

A runner whose config names a provider for the allocated environment's kind
runs its `provision` command after the claim and reports the result here
(`PUT /attempts/{id}/environment/`): `database_url`, `ports`, `container`,
`host_path`. The report is a holder write, fenced like the others: only the
live holder (its lease token, or the command's attempt token) records onto
its own active allocation. The record replaces the previous one (a PUT), is
kept on the allocation after it is released (the audit of what existed), and
the work context lays it over the environment's catalogued resources, so
`leasehold run` hands it to the command as `LEASEHOLD_ENV_*` (SPEC §15.2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.errors import EnvironmentUnavailable, LedgerError, ValidationFailed
from leases.models import Allocation, AllocationStatus, Attempt
from leases.services.holding import HolderProof, extend_lease, held_attempt, refusals_after_commit
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType
from ledger.services import event_append

PROVISIONED_FIELDS = ("database_url", "ports", "container", "host_path")
# How a provisioned name reads in the environment's resources (`environments.models.RESOURCE_KEYS`).
RESOURCE_NAMES = {
    "database_url": "database_url",
    "ports": "ports",
    "container": "container_name",
    "host_path": "host_path",
}
DATABASE_URL_MAX_CHARS = 2000
CONTAINER_MAX_CHARS = 200
HOST_PATH_MAX_CHARS = 500
PORTS_MAX_ITEMS = 32
PORT_MAX = 65535
# Text holds no control character (PostgreSQL's JSON cannot store U+0000); `_text` refuses lone surrogates.
_TEXT_CHARACTER = r"[^\u0000-\u001f\u007f]"
# A URL with a scheme and no password: no ':' before an '@' within the authority (where urlsplit finds one).
DATABASE_URL_PATTERN = rf"^[A-Za-z][A-Za-z0-9+.-]*://(?![^/?#]*:[^/?#]*@){_TEXT_CHARACTER}*$"
CONTAINER_PATTERN = rf"^[^\s\u0000-\u001f\u007f\u0085]{_TEXT_CHARACTER}*$"
HOST_PATH_PATTERN = rf"^/{_TEXT_CHARACTER}*$"
_DATABASE_URL = re.compile(DATABASE_URL_PATTERN)
_CONTAINER = re.compile(CONTAINER_PATTERN)
_HOST_PATH = re.compile(HOST_PATH_PATTERN)


def _refuse(field: str, requirement: str) -> ValidationFailed:
    return ValidationFailed(f"{field} must be {requirement}.", details={"fields": {field: [requirement]}})


def _text(value: Any, *, field: str, pattern: re.Pattern[str], max_chars: int, requirement: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _refuse(field, requirement)
    if len(value) > max_chars:
        raise _refuse(field, f"at most {max_chars} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(field, "valid Unicode text (no lone surrogate)") from None
    return value


def _ports(value: Any) -> list[int]:
    requirement = f"a list of at most {PORTS_MAX_ITEMS} TCP port numbers (1-{PORT_MAX})"
    if not isinstance(value, list) or len(value) > PORTS_MAX_ITEMS:
        raise _refuse("ports", requirement)
    for port in value:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= PORT_MAX:
            raise _refuse("ports", requirement)
    return list(value)


# The provider's text fields: the pattern a value must match, its length limit and the
# requirement a refusal names. `ports` is a list and has a check of its own.
_TEXT_FIELDS: dict[str, tuple[re.Pattern[str], int, str]] = {
    "database_url": (
        _DATABASE_URL,
        DATABASE_URL_MAX_CHARS,
        "a URL with a scheme, without a password or control characters",
    ),
    "container": (
        _CONTAINER,
        CONTAINER_MAX_CHARS,
        "a name without control characters, not starting with a space",
    ),
    "host_path": (_HOST_PATH, HOST_PATH_MAX_CHARS, "an absolute POSIX path without control characters"),
}


def provisioned_values(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a provider's report; unknown names and bad values are VALIDATION_ERROR naming the field.

    A value given as null is "not provisioned" and left out. A database URL must not carry a
    password (as in the catalogue, SPEC §6): the command finds its credentials elsewhere.
    """
    if not isinstance(raw, Mapping):
        raise ValidationFailed("The provisioned environment must be an object.")
    unknown = sorted(str(name) for name in raw if name not in PROVISIONED_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"Unknown fields: {', '.join(unknown)}; known are {', '.join(PROVISIONED_FIELDS)}.",
            details={"fields": {name: ["unknown field"] for name in unknown}},
        )
    values: dict[str, Any] = {}
    given = {name: value for name, value in raw.items() if value is not None}
    for name, (pattern, max_chars, requirement) in _TEXT_FIELDS.items():
        if name in given:
            values[name] = _text(given[name], field=name, pattern=pattern, max_chars=max_chars, requirement=requirement)
    if "ports" in given:
        values["ports"] = _ports(given["ports"])
    return values


def provisioned_resources(provisioned: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record under the names of the environment's resources (`container` → `container_name`)."""
    return {RESOURCE_NAMES[name]: value for name, value in (provisioned or {}).items() if name in RESOURCE_NAMES}


@dataclass(frozen=True)
class EnvironmentRecorded:
    allocation: Allocation
    lease_expires_at: datetime
    changed: bool


@refusals_after_commit
def attempt_record_environment(
    *, proof: HolderProof, provisioned: Mapping[str, Any]
) -> EnvironmentRecorded | LedgerError:
    """Record what the provider made on the holder's active allocation; renews the lease.

    Keeps: only the live holder writes, and only onto its own active allocation (an attempt
    that holds none is ENVIRONMENT_UNAVAILABLE, reason `not_allocated`); one
    `environment.provisioned` event per change, in the same transaction.
    """
    values = provisioned_values(provisioned)
    now = clock.now()
    held = held_attempt(proof, now=now, lock_task=False)
    if isinstance(held, LedgerError):
        return held
    allocation = _active_allocation(held)
    expires = extend_lease(held, now=now, seconds=held.lease_seconds, renewal=False)
    changed = allocation.provisioned != values
    if changed:
        Allocation.objects.filter(pk=allocation.pk).update(provisioned=values)
        allocation.provisioned = values
        event_append(
            type=EventType.ENVIRONMENT_PROVISIONED,
            actor=Actor(agent=held.agent),
            at=now,
            task=held.task,
            attempt_id=held.pk,
            payload={"environment": allocation.environment.name, "provisioned": values},
        )
    return EnvironmentRecorded(allocation=allocation, lease_expires_at=expires, changed=changed)


def _active_allocation(held: Attempt) -> Allocation:
    allocation = (
        Allocation.objects.select_for_update(no_key=True, of=("self",))
        .select_related("environment")
        .filter(attempt=held, status=AllocationStatus.ACTIVE)
        .order_by("-id")
        .first()
    )
    if allocation is None:
        raise EnvironmentUnavailable(
            f"Attempt {held.pk} holds no environment: claim with an environment (or a kind) to record one.",
            details={"attempt": held.pk, "reason": "not_allocated"},
        )
    return allocation
