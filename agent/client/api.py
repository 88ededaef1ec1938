"""A typed HTTP client for the agent API (SPEC §8): one method per endpoint.

Results are TypedDicts (JSON as the server sends it) or small records
(`Claim`, `Lease`), all in `agent.client.models`. How a call is sent (errors,
retries, idempotency keys, lease headers, the lost-lease registry) is
`agent.client.connection.ApiConnection`, which the client extends. Here are
projects, tasks, claims and the holder's calls; the reviews, decisions and
comments are `agent.client.reviews.ReviewCalls`, the feeds and the rest
`agent.client.feeds.FeedCalls`.

This module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from agent.client.connection import drop_none, usage_body
from agent.client.feeds import FeedCalls
from agent.client.models import (
    AttemptSummary,
    Claim,
    Finished,
    Lease,
    NoteKind,
    NoteWritten,
    Outcome,
    Page,
    Renewed,
    TaskText,
    TaskTextField,
)
from agent.client.reviews import ReviewCalls
from agent.client.wire import Abandon

if TYPE_CHECKING:
    from agent.client.usage import Usage


class LeaseholdClient(ReviewCalls, FeedCalls):
    """The agent API over HTTP. Safe to share between threads for independent calls."""

    # --- projects and tasks ---------------------------------------------------------

    def projects(self, *, cursor: str | None = None, limit: int | None = None) -> Page:
        return cast(Page, self.request("GET", "/projects/", params={"cursor": cursor, "limit": limit}))

    def project(self, slug: str, *, task_class: str | None = None) -> dict[str, Any]:
        """The project and its `progress`: tasks per unfinished status, and whether its work is `finished`."""
        path = f"/projects/{slug}/"
        return cast(dict[str, Any], self.request("GET", path, params={"task_class": task_class}))

    def tasks(
        self,
        *,
        project: str | None = None,
        status: str | None = None,
        effective_status: str | None = None,
        task_class: str | None = None,
        claimable: bool | None = None,
        q: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        ready: bool = False,
    ) -> Page:
        """Compact task list (`results` are `CompactTask`s); `ready`: claimable tasks in claim-next order."""
        params = {
            "project": project,
            "status": status,
            "effective_status": effective_status,
            "task_class": task_class,
            "claimable": None if claimable is None else ("true" if claimable else "false"),
            "q": q,
            "cursor": cursor,
            "limit": limit,
            "ready": "true" if ready else None,
        }
        return cast(Page, self.request("GET", "/tasks/", params=params))

    def create_task(
        self, project: str, title: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Create a task. `fields`: description, acceptance_criteria, status, priority, task_class, labels..."""
        body = {"project": project, "title": title, **drop_none(fields)}
        return cast(dict[str, Any], self.request("POST", "/tasks/", body=body, idempotency_key=idempotency_key))

    def apply_plan(
        self, plan: dict[str, Any], *, dry_run: bool = False, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """File a plan (SPEC §17): `{"project", "tasks": [{"ref", "title", ..., "blocked_by"}], "decisions"?}`."""
        params = {"dry_run": "true"} if dry_run else None
        answer = self.request("POST", "/plans/", body=plan, params=params, idempotency_key=idempotency_key)
        return cast(dict[str, Any], answer)

    def task(self, key: str) -> dict[str, Any]:
        """One task, full (description, acceptance criteria, blockers)."""
        return cast(dict[str, Any], self.request("GET", f"/tasks/{key}/"))

    def update_task(
        self,
        key: str,
        *,
        version: int,
        changes: dict[str, Any],
        lease: Lease | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with `If-Match: <version>`; with `lease` it is the holder's write (and renews)."""
        headers = {"If-Match": f'"{version}"'}
        if lease is not None:
            headers["X-Attempt-Id"] = str(lease.attempt_id)
        return cast(
            dict[str, Any],
            self.request(
                "PATCH", f"/tasks/{key}/", body=changes, headers=headers, lease=lease, idempotency_key=idempotency_key
            ),
        )

    def context(self, key: str) -> dict[str, Any]:
        """The bounded work context of a task."""
        return cast(dict[str, Any], self.request("GET", f"/tasks/{key}/context/"))

    # --- reading what the context cut, and dependencies ------------------------------

    def task_text(
        self, key: str, *, field: TaskTextField = "description", offset: int = 0, limit: int | None = None
    ) -> TaskText:
        """A range of a task's long text (`GET /tasks/{key}/text/`): what the bounded context cut."""
        params = {"field": field, "offset": offset, "limit": limit}
        return cast(TaskText, self.request("GET", f"/tasks/{key}/text/", params=params))

    def add_dependency(self, key: str, *, blocked_by: str, idempotency_key: str | None = None) -> dict[str, Any]:
        """Task `key` is blocked by `blocked_by` until that one is done."""
        return cast(
            dict[str, Any],
            self.request(
                "POST",
                f"/tasks/{key}/dependencies/",
                body={"blocked_by": blocked_by},
                idempotency_key=idempotency_key,
            ),
        )

    def remove_dependency(self, key: str, *, blocked_by: str, idempotency_key: str | None = None) -> dict[str, Any]:
        return cast(
            dict[str, Any],
            self.request(
                "POST",
                f"/tasks/{key}/dependencies/remove/",
                body={"blocked_by": blocked_by},
                idempotency_key=idempotency_key,
            ),
        )

    # --- claims -------------------------------------------------------------------------

    def claim(
        self,
        key: str,
        *,
        lease_seconds: int | None = None,
        branch: str | None = None,
        base_commit: str | None = None,
        environment: str | None = None,
        environment_kind: str | None = None,
        idempotency_key: str | None = None,
        paths: list[str] | None = None,
        paths_mode: str | None = None,
    ) -> Claim:
        """Claim the task; `paths` (default: the task's) are reserved while the lease lives (SPEC §19)."""
        body = drop_none(
            {
                "lease_seconds": lease_seconds,
                "branch": branch,
                "base_commit": base_commit,
                "environment": environment,
                "environment_kind": environment_kind,
                "paths": paths,
                "paths_mode": paths_mode,
            }
        )
        answer = self.request("POST", f"/tasks/{key}/claim/", body=body, idempotency_key=idempotency_key)
        return Claim.from_response(answer)

    def claim_next(
        self,
        project: str,
        *,
        task_class: str | None = None,
        lease_seconds: int | None = None,
        branch: str | None = None,
        base_commit: str | None = None,
        environment: str | None = None,
        environment_kind: str | None = None,
        idempotency_key: str | None = None,
        paths: list[str] | None = None,
        paths_mode: str | None = None,
        wait: int | None = None,
        until_empty: bool = False,
        abandon: Abandon | None = None,
    ) -> Claim | None:
        """Claim the project's next claimable task; None when nothing is claimable (204).

        With `wait` (seconds, at most 60) the server holds the call until a task
        becomes claimable for this agent or the time is up (SPEC §25); with
        `until_empty` too it answers None at once when the project's work is finished.
        `abandon` cuts the wait short from another thread (`CallAbandoned`); the
        same call with the same `idempotency_key` then tells what the server did.
        """
        body = drop_none(
            {
                "project": project,
                "wait": wait or None,
                "until_empty": (until_empty and bool(wait)) or None,
                "task_class": task_class,
                "lease_seconds": lease_seconds,
                "branch": branch,
                "base_commit": base_commit,
                "environment": environment,
                "environment_kind": environment_kind,
                "paths": paths,
                "paths_mode": paths_mode,
            }
        )
        timeout = (self._timeout or 0) + wait if wait else None
        answer = self.request(
            "POST", "/claims/next/", body=body, idempotency_key=idempotency_key, timeout=timeout, abandon=abandon
        )
        return None if answer is None else Claim.from_response(answer)

    # --- holder calls ---------------------------------------------------------------

    def renew(
        self,
        lease: Lease,
        *,
        lease_seconds: int | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        usage: Usage | None = None,
        idempotency_key: str | None = None,
    ) -> Renewed:
        """Heartbeat of the lease, an attempt's or a landing's (`lease.holds`).

        `usage` reports what was spent since the last report (SPEC §19); only work attempts
        spend, so usage on a landing's lease is a caller's mistake and raises ValueError.
        """
        reported = usage_body(usage)
        if reported and lease.holds != "attempts":
            raise ValueError(f"usage is reported on a work attempt's lease, not on {lease.holds} {lease.attempt_id}")
        body = drop_none({"lease_seconds": lease_seconds, "usage": reported})
        return cast(
            Renewed,
            self.request(
                "POST",
                lease.renew_path,
                body=body,
                lease=lease,
                retries=retries,
                timeout=timeout,
                idempotency_key=idempotency_key,
                # A retried renewal only extends the lease again; reported usage would count twice.
                keyed=bool(reported),
            ),
        )

    def note(
        self,
        lease: Lease,
        content: str,
        *,
        kind: NoteKind = "progress",
        next_steps: list[str] | None = None,
        important: bool = False,
        idempotency_key: str | None = None,
        usage: Usage | None = None,
    ) -> NoteWritten:
        body: dict[str, Any] = {
            "kind": kind,
            "content": content,
            "next_steps": next_steps or [],
            "important": important,
        }
        if usage_body(usage):
            body["usage"] = usage_body(usage)
        return cast(
            NoteWritten,
            self.request(
                "POST", f"/attempts/{lease.attempt_id}/notes/", body=body, lease=lease, idempotency_key=idempotency_key
            ),
        )

    def set_git(
        self,
        lease: Lease,
        *,
        branch: str | None = None,
        base_commit: str | None = None,
        head_commit: str | None = None,
        commits_ahead: int | None = None,
        dirty: bool | None = None,
        pushed: bool | None = None,
        worktree_path: str | None = None,
        host: str | None = None,
        usage: Usage | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, AttemptSummary]:
        """Record git facts of the attempt (SPEC §15.4); a fact left None is not sent (and not changed)."""
        facts = {
            "branch": branch,
            "base_commit": base_commit,
            "head_commit": head_commit,
            "commits_ahead": commits_ahead,
            "dirty": dirty,
            "pushed": pushed,
            "worktree_path": worktree_path,
            "host": host,
            "usage": usage_body(usage),
        }
        answer = self.request(
            "POST",
            f"/attempts/{lease.attempt_id}/git/",
            body=drop_none(facts),
            lease=lease,
            idempotency_key=idempotency_key,
        )
        return cast(dict[str, AttemptSummary], answer)

    def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        result_summary: str | None = None,
        next_steps: list[str] | None = None,
        failure_reason_code: str | None = None,
        interruption_reason_code: str | None = None,
        acknowledged_version: int | None = None,
        git: dict[str, Any] | None = None,
        findings: list[str] | None = None,
        idempotency_key: str | None = None,
        usage: Usage | None = None,
    ) -> Finished:
        """End the attempt; `git` carries the git facts of the end (SPEC §15.4: head_commit, commits_ahead, …)."""
        body = drop_none(
            {
                "outcome": outcome,
                "result_summary": result_summary,
                "next_steps": next_steps,
                "failure_reason_code": failure_reason_code,
                "interruption_reason_code": interruption_reason_code,
                "acknowledged_version": acknowledged_version,
                "git": git or None,
                "findings": findings,
                "usage": usage_body(usage),
            }
        )
        return cast(
            Finished,
            self.request(
                "POST", f"/attempts/{lease.attempt_id}/finish/", body=body, lease=lease, idempotency_key=idempotency_key
            ),
        )

    def release(self, lease: Lease, *, reason: str = "", idempotency_key: str | None = None) -> Finished:
        return cast(
            Finished,
            self.request(
                "POST",
                f"/attempts/{lease.attempt_id}/release/",
                body={"reason": reason},
                lease=lease,
                idempotency_key=idempotency_key,
            ),
        )

    def record_environment(
        self, lease: Lease, provisioned: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Record what an environment provider made on the attempt's allocation (SPEC §23.3); replaces the last."""
        return cast(
            dict[str, Any],
            self.request(
                "PUT",
                f"/attempts/{lease.attempt_id}/environment/",
                body=provisioned,
                lease=lease,
                idempotency_key=idempotency_key,
            ),
        )

    def attempt(self, attempt_id: int) -> dict[str, Any]:
        """An attempt with its latest notes as excerpts."""
        return cast(dict[str, Any], self.request("GET", f"/attempts/{attempt_id}/"))

    def mint_attempt_token(self, lease: Lease) -> str:
        """A fresh attempt token (SPEC §23.2) for the command the holder starts; it replaces the last one."""
        body = self.request("POST", f"/attempts/{lease.attempt_id}/token/", body={}, lease=lease)
        return str(body["attempt_token"])
