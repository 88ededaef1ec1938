"""Where environment providers (SPEC §23.3, `agent.runner.providers`) plug into a slot: the protocol and the
default of a runner without providers.

A slot calls `prepare` between the claim and the `run` child (its answer is added to the child's environment,
so `run`'s command sees `LEASEHOLD_ENV_*`), and `release` once the child has ended and the attempt with it;
the daemon calls `startup` once after registration, before any slot claims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from agent.client.api import LeaseholdClient
from agent.client.models import Claim
from agent.runner.config import ProjectConfig
from agent.runner.providers import Providers as ProviderLedger
from agent.runner.providers import ProviderSpec


class Slot(Protocol):
    """What a provider may know of a slot (`agent.runner.slots.Slot`)."""

    number: int
    agent: str
    directory: Path  # the slot's own directory under the runner's state dir
    client: LeaseholdClient  # the slot agent's client (its token)


class Providers(Protocol):
    """Environment providers (SPEC §23.3, `agent.runner.providers`): a sandbox per attempt, as long as its lease."""

    def startup(self, state_dir: Path, slots: Sequence[Slot]) -> None:
        """Tear down the leftovers of a runner before this one (registration has handed off all it held)."""

    def prepare(self, slot: Slot, project: ProjectConfig, claim: Claim) -> dict[str, str]:
        """Provision what the claim's environment needs; the variables the `run` child (and its command) get.

        Raises to refuse the claim: the attempt is then handed off (`environment_unavailable`)."""

    def release(self, slot: Slot, project: ProjectConfig, claim: Claim, sandbox: dict[str, str]) -> None:
        """Tear down what `prepare` made, once the attempt has ended."""


class NoProviders:
    """No provider configured: nothing to provision."""

    def startup(self, state_dir: Path, slots: Sequence[Slot]) -> None:
        return None

    def prepare(self, slot: Slot, project: ProjectConfig, claim: Claim) -> dict[str, str]:
        return {}

    def release(self, slot: Slot, project: ProjectConfig, claim: Claim, sandbox: dict[str, str]) -> None:
        return None


class ConfiguredProviders:
    """The `[providers.KIND]` of `runner.toml` (`agent.runner.providers`): a sandbox per attempt whose claim
    allocated an environment of a kind with a provider, recorded locally before it is made, torn down when the
    attempt ends, and at start for whatever a runner before this one left.
    """

    def __init__(self, specs: dict[str, ProviderSpec], *, log: Callable[[str], None]) -> None:
        self.specs = specs
        self._log = log
        self._ledger: ProviderLedger | None = None

    @property
    def ledger(self) -> ProviderLedger:
        if self._ledger is None:
            raise RuntimeError("startup() comes first: the state dir is known once the runner has registered")
        return self._ledger

    def startup(self, state_dir: Path, slots: Sequence[Slot]) -> None:
        self._ledger = ProviderLedger(self.specs, state_dir=state_dir, log=self._log)
        # Registration handed off every attempt the slots held: every recorded sandbox is a leftover.
        self.ledger.teardown_leftovers(set())

    def prepare(self, slot: Slot, project: ProjectConfig, claim: Claim) -> dict[str, str]:
        # The slot hands the claim off itself (`environment_unavailable`) when this raises.
        sandbox = self.ledger.prepare(slot.client, claim, hand_off=False)
        return sandbox.variables() if sandbox is not None else {}

    def release(self, slot: Slot, project: ProjectConfig, claim: Claim, sandbox: dict[str, str]) -> None:
        self.ledger.release(claim.lease.attempt_id)
