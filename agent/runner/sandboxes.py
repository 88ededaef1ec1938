"""Where environment providers (SPEC §23.3, `agent.runner.providers`) plug into a slot: the protocol and the
default of a runner without providers.

A slot calls `prepare` between the claim and the `run` child (its answer is added to the child's environment,
so `run`'s command sees `LEASEHOLD_ENV_*`), and `release` once the child has ended and the attempt with it;
the daemon calls `startup` once after registration, before any slot claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.client.models import Claim
from agent.runner.config import ProjectConfig


class Slot(Protocol):
    """What a provider may know of a slot (`agent.runner.slots.Slot`)."""

    number: int
    agent: str
    directory: Path  # the slot's own directory under the runner's state dir


class Providers(Protocol):
    """Environment providers (SPEC §23.3, `agent.runner.providers`): a sandbox per attempt, as long as its lease."""

    def startup(self, slots: Sequence[Slot]) -> None:
        """Tear down the leftovers of a runner before this one."""

    def prepare(self, slot: Slot, project: ProjectConfig, claim: Claim) -> dict[str, str]:
        """Provision what the claim's environment needs; the variables the `run` child (and its command) get.

        Raises to refuse the claim: the attempt is then handed off (`environment_unavailable`)."""

    def release(self, slot: Slot, project: ProjectConfig, claim: Claim, sandbox: dict[str, str]) -> None:
        """Tear down what `prepare` made, once the attempt has ended."""


class NoProviders:
    """No provider configured: nothing to provision."""

    def startup(self, slots: Sequence[Slot]) -> None:
        return None

    def prepare(self, slot: Slot, project: ProjectConfig, claim: Claim) -> dict[str, str]:
        return {}

    def release(self, slot: Slot, project: ProjectConfig, claim: Claim, sandbox: dict[str, str]) -> None:
        return None
