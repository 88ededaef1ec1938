"""Environment providers (SPEC §23.3): a sandbox per attempt that lives exactly as long as its lease.

The runner's config names a provider per environment kind (`[providers.KIND]`: `provision`, `teardown`, an
executable path or an argv list, and `timeout_seconds`, default 300). Between a slot's claim and its `run`
child, `Providers.prepare` looks at the claim's environment (the work context's `environment`); when its
kind has a provider it:

1. writes a local record of the attempt (`<state_dir>/providers/<attempt>.json`) BEFORE running anything,
   so a runner that dies from here on still knows there may be something to tear down;
2. runs `provision` (stdin: the allocation's JSON; `LEASEHOLD_TASK`, `LEASEHOLD_ATTEMPT_ID`,
   `LEASEHOLD_ENV_NAME`, `LEASEHOLD_ENV_KIND`; never a token) and checks the JSON it prints;
3. adds that JSON to the local record, then records it on the server (`PUT /attempts/{id}/environment/`),
   whence the work context gives it to `leasehold run`'s command as `LEASEHOLD_ENV_*`.

A step that fails tears down whatever may have been made (teardown gets what is known), drops the record when
the teardown succeeded, hands the claim off (`environment_unavailable`, with a warning note holding the
provider's stderr tail) and raises `ProvisionFailed`. `release` runs `teardown` when the attempt has ended;
`teardown_leftovers` runs it at the runner's start for every record whose attempt the runner no longer holds.
A teardown that fails keeps its record, so the next start tries again.

HTTP only: the server is reached through `agent.client`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.models import Claim, Lease
from agent.runner.provider_commands import (
    DEFAULT_TIMEOUT_SECONDS,
    ProviderError,
    command_argv,
    provisioned_from,
    run_command,
)

PROVIDER_KEYS = ("provision", "teardown", "timeout_seconds")
LEDGER_DIRECTORY = "providers"
# How the provisioned names read as the command's variables (SPEC §15.2).
VARIABLES = {
    "database_url": "LEASEHOLD_ENV_DATABASE_URL",
    "container": "LEASEHOLD_ENV_CONTAINER",
    "host_path": "LEASEHOLD_ENV_HOST_PATH",
}


class ProviderConfigError(ValueError):
    """A `[providers.KIND]` table the runner cannot use; the message names the table and the key."""


class ProvisionFailed(Exception):
    """The claim's environment could not be provisioned; the claim was handed off (`environment_unavailable`)."""

    def __init__(self, message: str, *, stderr_tail: str = "", handed_off: bool = False) -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail
        self.handed_off = handed_off


@dataclass(frozen=True)
class ProviderSpec:
    kind: str
    provision: list[str]
    teardown: list[str]
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class Sandbox:
    """What `prepare` made for one attempt."""

    attempt_id: int
    task: str
    kind: str
    environment: str
    provisioned: dict[str, Any]

    def variables(self) -> dict[str, str]:
        """The `LEASEHOLD_ENV_*` variables of the provisioned values (as `leasehold run` sets them from the context)."""
        given = self.provisioned
        found = {variable: str(given[name]) for name, variable in VARIABLES.items() if name in given}
        ports = [str(port) for port in self.provisioned.get("ports") or []]
        if ports:
            found["LEASEHOLD_ENV_PORTS"] = ",".join(ports)
            found["LEASEHOLD_ENV_PORT"] = ports[0]
        return {"LEASEHOLD_ENV_NAME": self.environment, **found}


def provider_specs(tables: Mapping[str, Any]) -> dict[str, ProviderSpec]:
    """The `[providers]` table of `runner.toml`, checked: unknown keys are an error naming the key."""
    specs = {}
    for kind, table in tables.items():
        where = f"[providers.{kind}]"
        if not isinstance(table, Mapping):
            raise ProviderConfigError(f"{where} must be a table with provision and teardown")
        unknown = sorted(set(table) - set(PROVIDER_KEYS))
        if unknown:
            raise ProviderConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(PROVIDER_KEYS)})")
        try:
            provision = command_argv(table.get("provision"), where=f"{where} provision")
            teardown = command_argv(table.get("teardown"), where=f"{where} teardown")
        except ValueError as error:
            raise ProviderConfigError(str(error)) from None
        timeout = table.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ProviderConfigError(f"{where} timeout_seconds must be a positive number of seconds")
        specs[kind] = ProviderSpec(kind=kind, provision=provision, teardown=teardown, timeout_seconds=float(timeout))
    return specs


class Providers:
    """The runner's providers, keyed by environment kind, and its ledger of sandboxes (one file per attempt)."""

    def __init__(
        self, specs: Mapping[str, ProviderSpec], *, state_dir: Path, log: Callable[[str], None] | None = None
    ) -> None:
        self.specs = dict(specs)
        self.ledger = Path(state_dir) / LEDGER_DIRECTORY
        self._log = log or (lambda message: print(f"leasehold runner: {message}", file=sys.stderr))

    @classmethod
    def from_config(
        cls, tables: Mapping[str, Any], *, state_dir: Path, log: Callable[[str], None] | None = None
    ) -> Providers:
        return cls(provider_specs(tables), state_dir=state_dir, log=log)

    def provider_for(self, claim: Claim) -> ProviderSpec | None:
        environment = claim.context.get("environment") or {}
        return self.specs.get(str(environment.get("kind") or ""))

    # --- one attempt ----------------------------------------------------------------------

    def prepare(self, client: LeaseholdClient, claim: Claim, *, hand_off: bool = True) -> Sandbox | None:
        """Provision the claim's environment (see the module's docstring); None when its kind has no provider.

        Raises `ProvisionFailed` after cleaning up; with `hand_off` (the default) the claim has been handed
        off first (`environment_unavailable`), else the caller hands it off.
        """
        spec = self.provider_for(claim)
        if spec is None:
            return None
        lease = claim.lease
        allocation = allocation_of(claim)
        record = {"attempt_id": lease.attempt_id, "task": lease.task, "kind": spec.kind, "allocation": allocation}
        self._write(lease.attempt_id, {**record, "provisioned": None, "teardown": spec.teardown})
        try:
            finished = run_command(
                spec.provision,
                stdin=allocation,
                variables=_variables(allocation),
                timeout_seconds=spec.timeout_seconds,
                what=f"provision ({spec.kind})",
            )
            provisioned = provisioned_from(finished.stdout)
        except ProviderError as error:
            self._fail(client, lease, spec, allocation, None, error, hand_off=hand_off)
        self._write(lease.attempt_id, {**record, "provisioned": provisioned, "teardown": spec.teardown})
        try:
            client.record_environment(lease, provisioned)
        except LeaseholdError as error:
            refused = ProviderError(f"the server did not record the sandbox: {error.code}: {error}")
            self._fail(client, lease, spec, allocation, provisioned, refused, hand_off=hand_off)
        self._log(f"provisioned {spec.kind} {allocation['environment']['name']} for {lease.task}")
        return Sandbox(
            attempt_id=lease.attempt_id,
            task=lease.task,
            kind=spec.kind,
            environment=str(allocation["environment"]["name"]),
            provisioned=provisioned,
        )

    def release(self, attempt_id: int) -> bool:
        """Tear down the attempt's sandbox (the attempt has ended) and drop its record.

        True when nothing is left (or there was nothing); False when the teardown failed and the record is
        kept for `teardown_leftovers`.
        """
        record = self._read(attempt_id)
        if record is None:
            return True
        return self._teardown(record)

    def teardown_leftovers(self, held_attempt_ids: Collection[int]) -> list[int]:
        """At the runner's start: tear down the sandbox of every recorded attempt it no longer holds.

        Returns the attempt ids whose sandbox is gone now.
        """
        cleaned = []
        for attempt_id in self.recorded():
            if attempt_id in held_attempt_ids:
                continue
            record = self._read(attempt_id)
            if record is not None and self._teardown(record, leftover=True):
                cleaned.append(attempt_id)
        return cleaned

    def recorded(self) -> list[int]:
        """The attempts the ledger holds a sandbox record for."""
        if not self.ledger.is_dir():
            return []
        return sorted(int(path.stem) for path in self.ledger.glob("*.json") if path.stem.isdigit())

    # --- inside -----------------------------------------------------------------------------

    def _fail(
        self,
        client: LeaseholdClient,
        lease: Lease,
        spec: ProviderSpec,
        allocation: dict[str, Any],
        provisioned: dict[str, Any] | None,
        error: ProviderError,
        *,
        hand_off: bool,
    ) -> NoReturn:
        record = {"attempt_id": lease.attempt_id, "task": lease.task, "kind": spec.kind, "allocation": allocation}
        self._teardown({**record, "provisioned": provisioned, "teardown": spec.teardown})
        message = f"environment provider {spec.kind} failed for {lease.task}: {error}"
        self._log(message + (f"; stderr: {error.stderr_tail}" if error.stderr_tail else ""))
        handed_off = hand_off and hand_off_unavailable(client, lease, message, stderr_tail=error.stderr_tail)
        raise ProvisionFailed(message, stderr_tail=error.stderr_tail, handed_off=handed_off)

    def _teardown(self, record: Mapping[str, Any], *, leftover: bool = False) -> bool:
        spec = self.specs.get(str(record.get("kind")))
        argv = spec.teardown if spec is not None else list(record.get("teardown") or [])
        allocation = record.get("allocation") or {}
        attempt_id = int(record["attempt_id"])
        try:
            run_command(
                argv,
                stdin={**allocation, "provisioned": record.get("provisioned")},
                variables=_variables(allocation),
                timeout_seconds=spec.timeout_seconds if spec is not None else DEFAULT_TIMEOUT_SECONDS,
                what=f"teardown ({record.get('kind')})",
            )
        except ProviderError as error:
            tail = f"; stderr: {error.stderr_tail}" if error.stderr_tail else ""
            self._log(f"teardown of attempt {attempt_id}'s sandbox failed ({error}{tail}); kept for the next start")
            return False
        with contextlib.suppress(FileNotFoundError):
            (self.ledger / f"{attempt_id}.json").unlink()
        which = "the leftover sandbox" if leftover else "the sandbox"
        self._log(f"tore down {which} of attempt {attempt_id} ({record.get('task')})")
        return True

    def _write(self, attempt_id: int, record: Mapping[str, Any]) -> None:
        """Write the record durably (temporary file, fsync, rename, fsync of the directory)."""
        self.ledger.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.ledger / f"{attempt_id}.json"
        temporary = target.with_suffix(".tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(record, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
        directory = os.open(self.ledger, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _read(self, attempt_id: int) -> dict[str, Any] | None:
        try:
            record = json.loads((self.ledger / f"{attempt_id}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            self._log(f"the sandbox record of attempt {attempt_id} is unreadable; left for a person to check")
            return None
        return record if isinstance(record, dict) else None


def allocation_of(claim: Claim) -> dict[str, Any]:
    """What provision and teardown read on stdin: the attempt and its allocated environment."""
    return {
        "task": claim.lease.task,
        "attempt_id": claim.lease.attempt_id,
        "epoch": claim.lease.epoch,
        "environment": dict(claim.context.get("environment") or {}),
    }


def _variables(allocation: Mapping[str, Any]) -> dict[str, str]:
    environment = allocation.get("environment") or {}
    return {
        "LEASEHOLD_TASK": str(allocation.get("task") or ""),
        "LEASEHOLD_ATTEMPT_ID": str(allocation.get("attempt_id") or ""),
        "LEASEHOLD_ENV_NAME": str(environment.get("name") or ""),
        "LEASEHOLD_ENV_KIND": str(environment.get("kind") or ""),
    }


def hand_off_unavailable(client: LeaseholdClient, lease: Lease, message: str, *, stderr_tail: str = "") -> bool:
    """Hand the claim off (`environment_unavailable`) with a warning note holding the provider's stderr tail.

    False when the server did not take it (the lease is already lost, or unreachable): the lease then ends
    on its own.
    """
    content = message + (f"\n\nProvider stderr (tail):\n{stderr_tail}" if stderr_tail else "")
    with contextlib.suppress(LeaseholdError):
        client.note(lease, content[:8000], kind="warning")
    try:
        client.finish(
            lease,
            "handoff",
            interruption_reason_code="environment_unavailable",
            result_summary=message[:2000],
        )
    except LeaseholdError:
        return False
    return True
