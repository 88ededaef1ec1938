"""The lean path (api/lean.py) answers exactly as the full stack: status, headers, body, log lines.

One story of requests — successes, every refusal the hot routes give, bad
input, unknown fields, idempotent replays, throttling, missing and bad
authentication, wrong methods, a cookie, a 500 — runs through Django's
`WSGIHandler` and, from the same database state, through `LeanWSGIHandler`;
every answer must be the same bytes. Randomness is pinned (lease-token salts,
request ids) and the database is rolled back to a savepoint between the two
runs (PostgreSQL's sequences reset by hand: a rollback does not undo them).
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection, transaction
from django.test import override_settings

from api.lean import LeanWSGIHandler, application_class
from leases.models import Attempt, Note
from ledger.actors import SYSTEM
from ledger.models import Event, Project
from runners.services import runner_create
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

Answer = tuple[str, list[tuple[str, str]], bytes]


def call(
    app: Callable[..., Any],
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    query: str = "",
) -> Answer:
    """One request through a WSGI application, as gunicorn would make it."""
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "localhost",
        "HTTP_X_REQUEST_ID": "req-1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(data),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if data:
        environ["CONTENT_LENGTH"] = str(len(data))
        environ["CONTENT_TYPE"] = "application/json"
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    for name, value in (headers or {}).items():
        key = name.upper().replace("-", "_")
        environ[key if key in ("CONTENT_LENGTH", "CONTENT_TYPE") else f"HTTP_{key}"] = value
    if environ.get("HTTP_X_REQUEST_ID") == "":
        del environ["HTTP_X_REQUEST_ID"]
    started: list[Any] = []
    result = app(environ, lambda status, response_headers: started.extend([status, response_headers]))
    try:
        content = b"".join(result)
    finally:
        result.close()
    return started[0], list(started[1]), content


class Tokens:
    """`secrets` for lease-token salts and attempt tokens: the same sequence in both runs."""

    def __init__(self) -> None:
        self.issued = 0

    def token_hex(self, size: int) -> str:
        self.issued += 1
        return f"{self.issued:0{size * 2}x}"

    def token_urlsafe(self, size: int) -> str:
        return self.token_hex(size)


class RequestIds:
    """`uuid.uuid4` for the request ids the server makes up: the same sequence in both runs."""

    def __init__(self) -> None:
        self.issued = 0

    def uuid4(self) -> uuid.UUID:
        self.issued += 1
        return uuid.UUID(int=self.issued)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = {
            name: value
            for name, value in vars(record).items()
            if name in ("request_id", "method", "path", "status", "agent", "attempt", "code", "status_code")
        }
        self.lines.append({"logger": record.name, "level": record.levelno, "message": record.getMessage(), **fields})


def story(app: Callable[..., Any], world: dict[str, Any]) -> Iterator[Answer]:
    """The requests, each using what the run's own earlier answers said (ids, tokens)."""
    token, other = world["token"], world["other_token"]
    slug = world["slug"]

    def post(path: str, body: Any = None, **kwargs: Any) -> Answer:
        return call(app, "POST", path, body, **kwargs)

    # claim-next: a claim under a key, its replay, the same key with another body, bad input.
    claimed = post("/api/v1/claims/next/", {"project": slug}, token=token, headers={"Idempotency-Key": "k-1"})
    yield claimed
    yield post("/api/v1/claims/next/", {"project": slug}, token=token, headers={"Idempotency-Key": "k-1"})
    yield post(
        "/api/v1/claims/next/", {"project": slug, "lease_seconds": 90}, token=token, headers={"Idempotency-Key": "k-1"}
    )
    yield post("/api/v1/claims/next/", {"project": slug}, token=token, headers={"Idempotency-Key": "bad key"})
    yield post("/api/v1/claims/next/", {"project": slug, "colour": "red"}, token=token)
    yield post("/api/v1/claims/next/", {}, token=token)
    yield post("/api/v1/claims/next/", {"project": "no-such-project"}, token=token)
    yield post("/api/v1/claims/next/", {"project": slug, "lease_seconds": "long"}, token=token)
    yield post("/api/v1/claims/next/", raw=b"{not json", token=token)
    yield post("/api/v1/claims/next/", raw=b"[1, 2]", token=token)
    yield post("/api/v1/claims/next/", {"project": slug}, token=token, headers={"Accept": "application/xml"})
    yield post("/api/v1/claims/next/", {"project": slug}, token=token, headers={"Content-Length": "9999999"})

    claim = json.loads(claimed[2])
    attempt = f"/api/v1/attempts/{claim['attempt']['id']}"
    proof = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}

    # renew: success, a replay under a key, every refusal of the proof, bad input, another agent.
    yield post(f"{attempt}/renew/", {}, token=token, headers=proof)
    yield post(f"{attempt}/renew/", {"lease_seconds": 300}, token=token, headers={**proof, "Idempotency-Key": "r-1"})
    yield post(f"{attempt}/renew/", {"lease_seconds": 300}, token=token, headers={**proof, "Idempotency-Key": "r-1"})
    yield post(f"{attempt}/renew/", {}, token=token)
    yield post(f"{attempt}/renew/", {}, token=token, headers={**proof, "X-Lease-Token": "wrong"})
    yield post(f"{attempt}/renew/", {}, token=token, headers={**proof, "X-Lease-Epoch": str(claim["epoch"] + 1)})
    yield post(f"{attempt}/renew/", {}, token=token, headers={**proof, "X-Lease-Epoch": "-1"})
    yield post(f"{attempt}/renew/", {"lease_seconds": 0, "why": 1}, token=token, headers=proof)
    yield post(f"{attempt}/renew/", {}, token=other, headers=proof)
    yield post("/api/v1/attempts/999999/renew/", {}, token=token, headers=proof)
    yield post("/api/v1/attempts/0/renew/", {}, token=token, headers=proof)
    yield post(f"{attempt}/renew", {}, token=token, headers=proof)
    yield post(f"{attempt}/renew/", {}, token=token, headers=proof, query="format=json")

    # notes and git facts.
    yield post(f"{attempt}/notes/", {"kind": "checkpoint", "content": "half way", "next_steps": ["a"]}, token=token,
               headers=proof)  # fmt: skip
    yield post(f"{attempt}/notes/", {"kind": "landing", "content": "x"}, token=token, headers=proof)
    yield post(f"{attempt}/notes/", {"kind": "progress", "content": "x" * 8001}, token=token, headers=proof)
    yield post(f"{attempt}/notes/", {"kind": "progress", "content": "x", "mood": "good"}, token=token, headers=proof)
    yield post(f"{attempt}/git/", {"branch": "feature/web-1-search", "dirty": False}, token=token, headers=proof)
    yield post(f"{attempt}/git/", {}, token=token, headers=proof)
    yield post(f"{attempt}/git/", {"head_commit": "xyz", "remote": "origin"}, token=token, headers=proof)

    # An attempt token (SPEC §23.2): good for its own attempt's calls, refused elsewhere.
    minted = post(f"{attempt}/token/", {}, token=token, headers=proof)
    yield minted
    attempt_token = json.loads(minted[2])["attempt_token"]
    yield post(f"{attempt}/renew/", {}, token=attempt_token)
    yield post(f"{attempt}/notes/", {"kind": "progress", "content": "from the command"}, token=attempt_token)
    yield post("/api/v1/attempts/999999/renew/", {}, token=attempt_token)
    yield post("/api/v1/claims/next/", {"project": slug}, token=attempt_token)

    # Wrong methods, missing and bad authentication, a foreign host.
    yield call(app, "GET", f"{attempt}/renew/", token=token, headers=proof)
    yield call(app, "PUT", "/api/v1/claims/next/", {"project": slug}, token=token)
    yield post(f"{attempt}/renew/", {}, headers=proof)
    yield post(f"{attempt}/renew/", {}, token="not-a-token", headers=proof)
    yield post(f"{attempt}/renew/", {}, headers={**proof, "Authorization": "Basic abc"})
    yield post(f"{attempt}/renew/", {}, token=token, headers={**proof, "Host": "evil.example"})
    yield post(f"{attempt}/renew/", {}, token=token, headers={**proof, "X-Request-Id": "no spaces allowed"})

    # finish: bad input, done, then every call on the ended attempt.
    yield post(f"{attempt}/finish/", {"outcome": "finished"}, token=token, headers=proof)
    yield post(f"{attempt}/finish/", {"outcome": "failed"}, token=token, headers=proof)
    yield post(f"{attempt}/finish/", {"outcome": "done", "extra": 1}, token=token, headers=proof)
    yield post(f"{attempt}/finish/", {"outcome": "done", "result_summary": "ok"}, token=token, headers=proof)
    yield post(f"{attempt}/finish/", {"outcome": "done"}, token=token, headers=proof)
    yield post(f"{attempt}/renew/", {}, token=token, headers=proof)
    yield post(f"{attempt}/notes/", {"kind": "progress", "content": "late"}, token=token, headers=proof)

    # A runner's heartbeat (the runner's own token): idle slots, the same again, bad input, an agent's token.
    beat = "/api/v1/runners/heartbeat/"
    runner_token = world["runner_token"]
    yield post(beat, {"slots": [{"number": 1, "state": "idle", "attempt_id": None, "task": None}]}, token=runner_token)
    yield post(beat, {"slots": []}, token=runner_token)
    yield post(beat, {"slots": [{"number": 9, "state": "idle"}]}, token=runner_token)
    yield post(beat, {"slots": [], "mood": "idle"}, token=runner_token)
    yield post(beat, {"slots": []}, token=token)

    # The project runs dry: 204 at once, and after a (short) long-poll.
    yield post("/api/v1/claims/next/", {"project": slug}, token=token)
    yield post("/api/v1/claims/next/", {"project": slug, "wait": 1}, token=token)


def throttled_story(app: Callable[..., Any], world: dict[str, Any]) -> Iterator[Answer]:
    """Past the per-agent limit (3 a minute here) and past the failed authentications (2 a minute)."""
    for _ in range(4):
        yield call(app, "POST", "/api/v1/claims/next/", {"project": world["slug"]}, token=world["token"])
    for _ in range(3):
        yield call(app, "POST", "/api/v1/attempts/1/renew/", {}, token="lha_1_nope")


def failing_story(app: Callable[..., Any], world: dict[str, Any]) -> Iterator[Answer]:
    """A service that breaks: the envelope's 500, logged, from both."""
    claim = json.loads(call(app, "POST", "/api/v1/claims/next/", {"project": world["slug"]}, token=world["token"])[2])
    proof = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}
    yield call(app, "POST", f"/api/v1/attempts/{claim['attempt']['id']}/renew/", {}, token=world["token"],
               headers=proof)  # fmt: skip


def _sequences() -> list[tuple[str, int | None]]:
    if connection.vendor != "postgresql":
        return []  # SQLite's AUTOINCREMENT counters live in a table: the rollback restores them
    with connection.cursor() as cursor:
        cursor.execute("SELECT schemaname || '.' || sequencename, last_value FROM pg_sequences")
        return list(cursor.fetchall())


def _restore(sequences: list[tuple[str, int | None]]) -> None:
    with connection.cursor() as cursor:
        for name, last_value in sequences:
            if last_value is None:
                cursor.execute("SELECT setval(%s, 1, false)", [name])
            else:
                cursor.execute("SELECT setval(%s, %s, true)", [name, last_value])


def _state() -> tuple[Any, ...]:
    return (
        list(Attempt.objects.order_by("pk").values_list("pk", "status", "renew_count", "lease_expires_at")),
        list(Note.objects.order_by("pk").values_list("pk", "kind", "content")),
        list(Event.objects.order_by("pk").values_list("pk", "type")),
    )


def _both(
    monkeypatch: pytest.MonkeyPatch, world: dict[str, Any], run: Callable[..., Iterator[Answer]]
) -> dict[str, Any]:
    """The story through each handler from the same state: answers, log lines and the rows left."""
    records = Records()
    for name in ("leasehold.request", "django.request"):
        logging.getLogger(name).addHandler(records)
    # As Django's test client does: the handlers' signals must not close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    sequences = _sequences()
    outcomes: dict[str, Any] = {}
    try:
        for handler in (WSGIHandler, LeanWSGIHandler):
            savepoint = transaction.savepoint()
            _restore(sequences)
            cache.clear()
            monkeypatch.setattr("leases.tokens.secrets", Tokens())
            monkeypatch.setattr("api.request_log.uuid", RequestIds())
            records.lines = []
            answers = list(run(handler(), world))
            outcomes[handler.__name__] = {"answers": answers, "log": records.lines, "rows": _state()}
            transaction.savepoint_rollback(savepoint)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        for name in ("leasehold.request", "django.request"):
            logging.getLogger(name).removeHandler(records)
    return outcomes


def _assert_same(outcomes: dict[str, Any]) -> list[Answer]:
    full, lean = outcomes["WSGIHandler"], outcomes["LeanWSGIHandler"]
    assert len(full["answers"]) == len(lean["answers"])
    for index, (expected, got) in enumerate(zip(full["answers"], lean["answers"], strict=True)):
        assert got == expected, index
    assert lean["log"] == full["log"]
    assert lean["rows"] == full["rows"]
    return list(full["answers"])


@pytest.fixture
def world(db, clock) -> dict[str, Any]:
    project = cast(Project, ProjectFactory(slug="lean"))
    agent = AgentFactory(projects=[project])
    other = AgentFactory(projects=[project])
    TaskFactory(project=project, title="Fix the search copy")
    _, runner_token = runner_create(name="lean-runner", projects=[project], slots=1, actor=SYSTEM)
    return {
        "slug": project.slug,
        "token": agent.api_token,  # type: ignore[attr-defined]
        "other_token": other.api_token,  # type: ignore[attr-defined]
        "runner_token": runner_token,
    }


@pytest.mark.django_db
@override_settings(LEASEHOLD_LOG_FORMAT="json")
def test_the_lean_path_answers_every_hot_request_as_the_full_stack(monkeypatch, world):
    answers = _assert_same(_both(monkeypatch, world, story))
    statuses = [int(status.split()[0]) for status, _, _ in answers]
    # The story covers what it says: claims, replays, every kind of refusal, the empty project.
    assert statuses[:3] == [201, 201, 409]
    assert {200, 201, 204, 400, 401, 403, 404, 405, 409, 413} <= set(statuses), statuses
    assert 500 not in statuses, statuses
    assert any(("Idempotent-Replayed", "true") in headers for _, headers, _ in answers)
    assert all(("X-Content-Type-Options", "nosniff") in headers for _, headers, _ in answers)


@pytest.mark.django_db
@override_settings(LEASEHOLD_AGENT_REQUESTS_PER_MINUTE=3, LEASEHOLD_AUTH_FAILURES_PER_MINUTE=2)
def test_the_lean_path_throttles_as_the_full_stack(monkeypatch, world):
    answers = _assert_same(_both(monkeypatch, world, throttled_story))
    statuses = [int(status.split()[0]) for status, _, _ in answers]
    assert statuses == [201, 204, 204, 429, 401, 401, 429]
    assert any(name == "Retry-After" for name, _ in answers[3][1])


@pytest.mark.django_db
def test_the_lean_path_answers_a_broken_service_as_the_full_stack(monkeypatch, world):
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr("leases.apis.attempts.attempt_renew", broken)
    answers = _assert_same(_both(monkeypatch, world, failing_story))
    assert answers[0][0].startswith("500")
    assert json.loads(answers[0][2])["error"]["code"] == "INTERNAL_ERROR"


@pytest.mark.django_db
def test_the_lean_path_serves_hot_requests_without_the_middleware_stack(monkeypatch, world):
    handler = LeanWSGIHandler()
    full_stack: list[str] = []
    original = WSGIHandler.get_response

    def counted(self: WSGIHandler, request: Any) -> Any:
        full_stack.append(request.path)
        return original(self, request)

    monkeypatch.setattr(WSGIHandler, "get_response", counted)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        assert call(handler, "POST", "/api/v1/claims/next/", {"project": "lean"}, token=world["token"])[0][:3] == "201"
        assert call(handler, "GET", "/api/v1/projects/", token=world["token"])[0][:3] == "200"
        # The browsable API's page (a session, a CSRF token) is the full stack's to render.
        body, token = {"project": "lean"}, world["token"]
        assert call(handler, "POST", "/api/v1/claims/next/", body, token=token, headers={"Accept": "text/html"})
        assert call(handler, "POST", "/api/v1/claims/next/", body, token=token, query="format=api")
        # A cookie: the session and CSRF middleware have work (here: a malformed CSRF cookie replaced).
        assert call(handler, "POST", "/api/v1/claims/next/", body, token=token, headers={"Cookie": "csrftoken=short"})
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    assert full_stack == ["/api/v1/projects/", *["/api/v1/claims/next/"] * 3]


def test_the_served_application_is_the_lean_handler():
    from config.wsgi import application

    assert type(application) is LeanWSGIHandler


def test_the_switch_turns_the_lean_path_off():
    with override_settings(LEASEHOLD_LEAN_PATH=False):
        assert application_class() is WSGIHandler
    with override_settings(LEASEHOLD_LEAN_PATH=True):
        assert application_class() is LeanWSGIHandler
    # A middleware list the lean path does not reproduce: the full stack for everything.
    with override_settings(LEASEHOLD_LEAN_PATH=True, MIDDLEWARE=["django.middleware.common.CommonMiddleware"]):
        assert application_class() is WSGIHandler
