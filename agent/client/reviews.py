"""The reviewer's and the discussion's calls of the agent API (SPEC §16): reviews, decisions, comments."""

from __future__ import annotations

from typing import Any, cast

from agent.client.connection import ApiConnection, drop_none
from agent.client.models import Claim, Page


class ReviewCalls(ApiConnection):
    """Part of `agent.client.api.LeaseholdClient`."""

    # --- reviews, decisions, comments (SPEC §16) ------------------------------------

    def reviews(
        self,
        *,
        project: str | None = None,
        status: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page:
        params = {"project": project, "status": status, "cursor": cursor, "limit": limit}
        return cast(Page, self.request("GET", "/reviews/", params=params))

    def review_next(
        self,
        project: str,
        *,
        lease_seconds: int | None = None,
        idempotency_key: str | None = None,
        wait: int | None = None,
    ) -> Claim | None:
        """Claim the project's oldest open review (not your own work); None when there is none (204).

        With `wait` (seconds, at most 60) the server holds the call until a review opens or the time is up.
        """
        body = drop_none({"project": project, "lease_seconds": lease_seconds, "wait": wait or None})
        timeout = (self._timeout or 0) + wait if wait else None
        answer = self.request("POST", "/reviews/next/", body=body, idempotency_key=idempotency_key, timeout=timeout)
        return None if answer is None else Claim.from_response(answer)

    def review_claim(
        self, review_id: int, *, lease_seconds: int | None = None, idempotency_key: str | None = None
    ) -> Claim:
        body = drop_none({"lease_seconds": lease_seconds})
        answer = self.request("POST", f"/reviews/{review_id}/claim/", body=body, idempotency_key=idempotency_key)
        return Claim.from_response(answer)

    def decide(
        self,
        project: str,
        title: str,
        *,
        body: str = "",
        task: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Record a decision of the project (optionally about one task)."""
        payload = drop_none({"project": project, "title": title, "body": body, "task": task})
        return cast(dict[str, Any], self.request("POST", "/decisions/", body=payload, idempotency_key=idempotency_key))

    def decisions(
        self,
        *,
        project: str | None = None,
        task: str | None = None,
        status: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page:
        params = {"project": project, "task": task, "status": status, "cursor": cursor, "limit": limit}
        return cast(Page, self.request("GET", "/decisions/", params=params))

    def supersede_decision(self, decision_id: int, *, by: int, idempotency_key: str | None = None) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self.request(
                "POST", f"/decisions/{decision_id}/supersede/", body={"by": by}, idempotency_key=idempotency_key
            ),
        )

    def comment(self, key: str, body: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self.request("POST", f"/tasks/{key}/comments/", body={"body": body}, idempotency_key=idempotency_key),
        )

    def comments(self, key: str, *, cursor: str | None = None, limit: int | None = None) -> Page:
        return cast(Page, self.request("GET", f"/tasks/{key}/comments/", params={"cursor": cursor, "limit": limit}))
