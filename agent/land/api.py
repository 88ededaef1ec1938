"""The landing endpoints of the agent API (SPEC §21), on top of the agent's client.

A landing's lease (`landing_lease`) is a `Lease` that holds `landings`: its
`attempt_id` is the landing's id and its `epoch` the landing's, so the
client's one `renew` posts to `/landings/{id}/renew/` and
`agent.client.keeper.LeaseKeeper` holds a landing exactly as it holds a work
attempt.
"""

from __future__ import annotations

from typing import Any, cast

from agent.client.api import LeaseholdClient
from agent.client.connection import drop_none
from agent.client.models import Lease


class LandingClient(LeaseholdClient):
    """The agent API with the landing calls."""

    def landing_next(
        self,
        project: str,
        *,
        wait: int | None = None,
        lease_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any] | None:
        """Claim the next landing of the project (201), or None when there is nothing to land (204).

        With `wait` (seconds, at most 60) the server holds the request until a
        landing can be claimed or the wait is over. The same call with the same
        `idempotency_key` answers what the first one did (`agent.land.lander.settle_claim`).
        """
        body = drop_none({"project": project, "wait": wait, "lease_seconds": lease_seconds})
        timeout = self._timeout + wait if wait else None
        answer = self.request("POST", "/landings/next/", body=body, timeout=timeout, idempotency_key=idempotency_key)
        return cast(dict[str, Any] | None, answer)

    def landing_release(self, lease: Lease, *, reason: str = "") -> dict[str, Any]:
        """Give the landing back before it lapses: the target is free for the next lander at once."""
        body = drop_none({"reason": reason[:500] or None})
        answer = self.request("POST", f"/landings/{lease.attempt_id}/release/", body=body, lease=lease)
        return cast(dict[str, Any], answer)

    def landing_finish(self, lease: Lease, body: dict[str, Any]) -> dict[str, Any]:
        """End the landing with its result and every task's outcome."""
        answer = self.request("POST", f"/landings/{lease.attempt_id}/finish/", body=body, lease=lease)
        return cast(dict[str, Any], answer)

    def project_landing(self, project: str) -> dict[str, Any]:
        """The project's landing settings, queue, live landing and latest results."""
        return cast(dict[str, Any], self.request("GET", f"/projects/{project}/landing/"))


def landing_lease(landing: dict[str, Any]) -> Lease:
    """The lease of a claimed landing, in the shape the lease keeper holds."""
    return Lease(
        attempt_id=int(landing["id"]),
        token=str(landing["lease_token"]),
        epoch=int(landing["epoch"]),
        task=f"landing {landing['id']}",
        renew_every_seconds=int(landing.get("renew_every_seconds") or 60),
        renew_attempts=int(landing.get("renew_attempts") or 3),
        lease_expires_at=landing.get("lease_expires_at"),
        holds="landings",
    )
