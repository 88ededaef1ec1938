"""Who did something: an agent, a human user, or the system (jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.models import Agent


@dataclass(frozen=True)
class Actor:
    agent: Agent | None = None
    user: Any = None  # settings.AUTH_USER_MODEL instance

    def __post_init__(self) -> None:
        if self.agent is not None and self.user is not None:
            raise ValueError("an actor is an agent or a user, not both")

    @classmethod
    def system(cls) -> Actor:
        return cls()

    @property
    def label(self) -> str:
        if self.agent is not None:
            return self.agent.handle
        if self.user is not None:
            return f"user:{self.user.get_username()}"
        return "system"


SYSTEM = Actor.system()
