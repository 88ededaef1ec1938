"""A typed HTTP client for the agent API (SPEC §8), with the retry rule of SPEC §13.

- One method per endpoint; results are TypedDicts (JSON as the server sends
  it) or small dataclasses (`Claim`, `Lease`).
- Errors raise the `agent.errors` class registered for the envelope's code.
- Retries: only errors whose envelope says `retryable` (STORAGE_BUSY,
  RATE_LIMITED, ENVIRONMENT_UNAVAILABLE, gateway 502/503/504) and connection
  failures, with exponential backoff and jitter, a bounded number of times.
  Every POST/PATCH carries an `Idempotency-Key` (generated when the caller
  gives none) and every retry re-sends the same key, so a retried call is
  answered, never done twice; GETs are safe to repeat as they are.
- Holder calls send `X-Lease-Token`/`X-Lease-Epoch`. Once a holder call is
  answered with a lease-ending code, or `forget_lease` is called, the client
  refuses to send that token again (`LeaseLost`) without asking the server.

This module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import httpx

from agent import __version__
from agent.errors import (
    LEASE_LOSS_CODES,
    ConnectionFailed,
    LeaseholdError,
    LeaseLost,
    error_from_envelope,
)
from agent.models import (
    AttemptSummary,
    Changes,
    Claim,
    CompactTask,
    Event,
    Finished,
    Lease,
    NoteKind,
    NoteWritten,
    Outcome,
    Page,
    Project,
    Renewed,
    lease_fingerprint,
)

__all__ = [
    "AttemptSummary",
    "Changes",
    "Claim",
    "CompactTask",
    "Event",
    "Finished",
    "Lease",
    "LeaseholdClient",
    "NoteKind",
    "NoteWritten",
    "Outcome",
    "Page",
    "Project",
    "Renewed",
    "api_root",
    "lease_fingerprint",
]

API_PREFIX = "/api/v1"
MUTATING_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})


def api_root(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/api/v1/` all name the same API."""
    root = url.strip().rstrip("/")
    if root.endswith(API_PREFIX):
        root = root[: -len(API_PREFIX)]
    return root


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class LeaseholdClient:
    """The agent API over HTTP. Safe to share between threads for independent calls."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 4,
        backoff_base: float = 0.25,
        backoff_max: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        trace_path: str | None = None,
        on_request: Callable[[httpx.Request], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`trace_path` appends a JSON line per request (no tokens); `on_request` sees each request as sent."""
        self.url = api_root(url)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._token = token
        self._timeout = timeout
        self._transport = transport
        self._trace_path = trace_path
        self._on_request = on_request
        self._sleep = sleep
        self._lost: set[str] = set()
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": f"leasehold-agent/{__version__}",
            },
            timeout=timeout,
            transport=transport,
            event_hooks={"request": [hook for hook in (self._trace if trace_path else None, on_request) if hook]},
        )

    def clone(self) -> LeaseholdClient:
        """A client with the same settings and its own connections (e.g. for a background thread)."""
        twin = LeaseholdClient(
            self.url,
            self._token,
            timeout=self._timeout,
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            transport=self._transport,
            trace_path=self._trace_path,
            on_request=self._on_request,
            sleep=self._sleep,
        )
        twin._lost = self._lost  # one registry: a lease lost to one is lost to both
        return twin

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LeaseholdClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- lost leases ------------------------------------------------------------------

    def forget_lease(self, lease: Lease) -> None:
        """Never send this lease's token again."""
        self._lost.add(lease_fingerprint(lease.token))

    def is_lost(self, lease: Lease) -> bool:
        return lease_fingerprint(lease.token) in self._lost

    # --- transport ----------------------------------------------------------------------

    def _trace(self, request: httpx.Request) -> None:
        """Append one JSON line per request sent (never a token: only its fingerprint)."""
        token = request.headers.get("X-Lease-Token")
        line = {
            "at": round(time.time(), 3),
            "method": request.method,
            "path": request.url.path,
            "lease": lease_fingerprint(token) if token else None,
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        assert self._trace_path is not None
        with open(self._trace_path, "a", encoding="utf-8") as trace:
            trace.write(json.dumps(line) + "\n")

    def backoff_delay(self, retry: int, error: LeaseholdError | None = None) -> float:
        """Exponential backoff with jitter: between half and all of base * 2**retry, capped."""
        ceiling = min(self.backoff_max, self.backoff_base * (2**retry))
        delay = random.uniform(ceiling / 2, ceiling)
        retry_after = error.details.get("retry_after_seconds") if error is not None else None
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), 60.0))
        return delay

    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        lease: Lease | None = None,
        idempotency_key: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one API call (retrying as the module docstring says); the parsed JSON, or None for 204."""
        method = method.upper()
        sent_headers = dict(headers or {})
        if lease is not None:
            if self.is_lost(lease):
                raise LeaseLost(
                    f"The lease on {lease.task} (attempt {lease.attempt_id}) is lost; its token is not sent again.",
                    details={"attempt": lease.attempt_id, "task": lease.task},
                )
            sent_headers["X-Lease-Token"] = lease.token
            sent_headers["X-Lease-Epoch"] = str(lease.epoch)
        if method in MUTATING_METHODS:
            # Fixed before the first try: every retry of this call sends the same key.
            sent_headers["Idempotency-Key"] = idempotency_key or f"lh-{uuid.uuid4().hex}"
        query = _drop_none(params or {})
        budget = self.max_retries if retries is None else retries
        retry = 0
        while True:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=body if method in MUTATING_METHODS else None,
                    params=query,
                    headers=sent_headers,
                    timeout=self._timeout if timeout is None else timeout,
                )
            except httpx.TransportError as exc:
                error: LeaseholdError = ConnectionFailed(f"{method} {path}: {exc.__class__.__name__}: {exc}")
                cause: BaseException | None = exc
            else:
                if response.status_code < 400:
                    return _parsed(response)
                error = error_from_envelope(_json_or_none(response), http_status=response.status_code)
                cause = None
                if lease is not None and error.code in LEASE_LOSS_CODES:
                    self.forget_lease(lease)
            if not error.retryable or retry >= budget:
                raise error from cause
            self._sleep(self.backoff_delay(retry, error))
            retry += 1

    # --- projects and tasks ---------------------------------------------------------

    def projects(self, *, cursor: str | None = None, limit: int | None = None) -> Page:
        return cast(Page, self.request("GET", "/projects/", params={"cursor": cursor, "limit": limit}))

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
    ) -> Page:
        """Compact task list (`results` are `CompactTask`s)."""
        params = {
            "project": project,
            "status": status,
            "effective_status": effective_status,
            "task_class": task_class,
            "claimable": None if claimable is None else ("true" if claimable else "false"),
            "q": q,
            "cursor": cursor,
            "limit": limit,
        }
        return cast(Page, self.request("GET", "/tasks/", params=params))

    def create_task(
        self, project: str, title: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Create a task. `fields`: description, acceptance_criteria, status, priority, task_class, labels..."""
        body = {"project": project, "title": title, **_drop_none(fields)}
        return cast(dict[str, Any], self.request("POST", "/tasks/", body=body, idempotency_key=idempotency_key))

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
    ) -> Claim:
        body = _drop_none(
            {
                "lease_seconds": lease_seconds,
                "branch": branch,
                "base_commit": base_commit,
                "environment": environment,
                "environment_kind": environment_kind,
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
    ) -> Claim | None:
        """Claim the project's next claimable task; None when nothing is claimable (204)."""
        body = _drop_none(
            {
                "project": project,
                "task_class": task_class,
                "lease_seconds": lease_seconds,
                "branch": branch,
                "base_commit": base_commit,
                "environment": environment,
                "environment_kind": environment_kind,
            }
        )
        answer = self.request("POST", "/claims/next/", body=body, idempotency_key=idempotency_key)
        return None if answer is None else Claim.from_response(answer)

    # --- holder calls ---------------------------------------------------------------

    def renew(
        self,
        lease: Lease,
        *,
        lease_seconds: int | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> Renewed:
        body = _drop_none({"lease_seconds": lease_seconds})
        return cast(
            Renewed,
            self.request(
                "POST", f"/attempts/{lease.attempt_id}/renew/", body=body, lease=lease, retries=retries, timeout=timeout
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
    ) -> NoteWritten:
        body = {"kind": kind, "content": content, "next_steps": next_steps or [], "important": important}
        return cast(
            NoteWritten,
            self.request(
                "POST", f"/attempts/{lease.attempt_id}/notes/", body=body, lease=lease, idempotency_key=idempotency_key
            ),
        )

    def set_git(
        self, lease: Lease, *, branch: str | None = None, base_commit: str | None = None
    ) -> dict[str, AttemptSummary]:
        body = _drop_none({"branch": branch, "base_commit": base_commit})
        answer = self.request("POST", f"/attempts/{lease.attempt_id}/git/", body=body, lease=lease)
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
        idempotency_key: str | None = None,
    ) -> Finished:
        body = _drop_none(
            {
                "outcome": outcome,
                "result_summary": result_summary,
                "next_steps": next_steps,
                "failure_reason_code": failure_reason_code,
                "interruption_reason_code": interruption_reason_code,
                "acknowledged_version": acknowledged_version,
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

    def attempt(self, attempt_id: int) -> dict[str, Any]:
        """An attempt with its latest notes as excerpts."""
        return cast(dict[str, Any], self.request("GET", f"/attempts/{attempt_id}/"))

    # --- feeds and the rest ---------------------------------------------------------

    def changes(self, *, since: int = 0, project: str | None = None, limit: int | None = None) -> Changes:
        params = {"since": since, "project": project, "limit": limit}
        return cast(Changes, self.request("GET", "/changes/", params=params))

    def search(
        self, q: str, *, project: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> Page:
        params = {"q": q, "project": project, "cursor": cursor, "limit": limit}
        return cast(Page, self.request("GET", "/search/", params=params))

    def heartbeat(self, *, retries: int | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The run heartbeat: this agent process is alive (touches no lease)."""
        return cast(dict[str, Any], self.request("POST", "/agents/me/heartbeat/", retries=retries, timeout=timeout))

    def metrics(self, *, days: int | None = None, project: str | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", "/metrics/", params={"days": days, "project": project}))


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _parsed(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise LeaseholdError(
            f"HTTP {response.status_code} answered with something other than JSON.",
            code="BAD_RESPONSE",
            http_status=response.status_code,
        ) from None
