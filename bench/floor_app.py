"""The floor's WSGI application (bench/floor.py): the agent cycle's four requests without Django.

Served by gunicorn with `manage.py serve`'s command line (`serve.gunicorn_command`),
it answers the four requests of the cycle — POST claim-next, renew, checkpoint
note, finish — at the same paths, with the same headers and JSON bodies, by
replaying the raw replay's captured statements (bench/replay.py, the same
`RawConnection`, one per request thread as Django keeps one per thread) and
filling the response Leasehold gave to the same request in a recorded cycle
(`LEASEHOLD_BENCH_FLOOR_SPEC`, a pickle bench/floor.py writes).

What it keeps of the request's work: reading and parsing the body, the bearer
token's SHA-256 against the agents it was given (in memory: the raw replay has
no authentication statement), claim-next's project by slug, a fresh lease
token whose hash the claim stores, the holder headers (token hash and epoch)
checked against what this process handed out (in memory: the raw replay's
statements check them in SQL on PostgreSQL as Leasehold's do), the statements,
and a JSON answer of the same shape, headers and size. What it leaves out is
everything else of the contract: the error envelope beyond a few fixed
answers, validation, idempotency, throttling, the request log line, the
storage deadline. It is a floor, not a server: holder state lives in the
worker that granted the claim (the client keeps its connection, so one worker
serves its cycle).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import ops
from bench.capture import Trace
from bench.replay import RawConnection, _fill

ATTEMPT_PATH = re.compile(r"^/api/v1/attempts/(\d+)/(renew|notes|finish)/$")
CLAIM_PATH = "/api/v1/claims/next/"
OPS = {"claim": ops.CLAIM_NEXT, "renew": ops.RENEW, "notes": ops.NOTE, "finish": ops.FINISH_DONE}

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _load() -> dict[str, Any]:
    with open(os.environ["LEASEHOLD_BENCH_FLOOR_SPEC"], "rb") as spec:
        return dict(pickle.load(spec))  # noqa: S301 - the bench's own file, written by bench/floor.py


SPEC = _load()
TRACES: dict[str, Trace] = SPEC["traces"]  # by OPS key
AGENTS: dict[str, dict[str, Any]] = SPEC["agents"]  # the SHA-256 of an API token -> agent_id, handle, project_id, slug
ANSWERS: dict[str, dict[str, Any]] = SPEC["answers"]  # by OPS key: status, headers, template (Sym leaves)
HELD: dict[int, dict[str, Any]] = {}  # attempt id -> the claim's symbols, token hash, agent
_local = threading.local()
STATUS = {200: "200 OK", 201: "201 Created", 204: "204 No Content", 401: "401 Unauthorized", 409: "409 Conflict"}


def _connection() -> RawConnection:
    raw = getattr(_local, "raw", None)
    if raw is None:
        raw = _local.raw = RawConnection(SPEC["vendor"], SPEC["dsn"])
    return raw


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _answer(start_response: StartResponse, name: str, symbols: dict[str, Any]) -> Iterable[bytes]:
    answer = ANSWERS[name]
    body = json.dumps(_fill(answer["template"], symbols), ensure_ascii=False, separators=(",", ":")).encode()
    headers = [(key, str(uuid.uuid4()) if key == "X-Request-Id" else value) for key, value in answer["headers"]]
    headers.append(("Content-Length", str(len(body))))
    start_response(STATUS[answer["status"]], headers)
    return [body]


def _refuse(start_response: StartResponse, status: int, code: str) -> Iterable[bytes]:
    body = json.dumps({"error": {"code": code, "message": code.lower(), "details": {}}}).encode()
    start_response(STATUS[status], [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    if environ["REQUEST_METHOD"] != "POST":
        return _refuse(start_response, 409, "METHOD_NOT_ALLOWED")
    length = int(environ.get("CONTENT_LENGTH") or 0)
    payload = json.loads(environ["wsgi.input"].read(length)) if length else {}
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    agent = (
        AGENTS.get(hashlib.sha256(authorization[7:].encode()).hexdigest()) if authorization[:7] == "Bearer " else None
    )
    if agent is None:
        return _refuse(start_response, 401, "NOT_AUTHENTICATED")
    path = environ["PATH_INFO"]
    raw = _connection()
    now = datetime.now(UTC)
    if path == CLAIM_PATH:
        if payload.get("project") != agent["slug"]:
            return _refuse(start_response, 409, "NOT_FOUND")
        symbols = {"agent_id": agent["agent_id"], "handle": agent["handle"], "project_id": agent["project_id"]}
        spec = OPS["claim"]
        spec.raw_inputs(symbols, raw)
        if spec.derive is not None:
            spec.derive(symbols)  # as the raw replay's `ops.raw_op` does before each trace
        token = secrets.token_urlsafe(32)  # 43 characters, as Leasehold's HMAC-derived token
        symbols["token_hash"] = hashlib.sha256(token.encode()).hexdigest()
        outcome = raw.run(TRACES["claim"], symbols, spec.derive)
        if outcome == "empty":
            start_response(STATUS[204], [("Content-Length", "0")])
            return [b""]
        if outcome != "ok":
            return _refuse(start_response, 409, "TASK_TAKEN")
        HELD[symbols["attempt_id"]] = {"symbols": symbols, "agent": agent}
        fill = {
            **symbols,
            "lease_token": token,
            "now_iso": _iso(now),
            "expires_iso": _iso(now + timedelta(seconds=ops.LEASE_SECONDS)),
        }
        return _answer(start_response, "claim", fill)
    matched = ATTEMPT_PATH.match(path)
    held = HELD.get(int(matched.group(1))) if matched else None
    presented = environ.get("HTTP_X_LEASE_TOKEN", "")
    if (
        held is None
        or held["agent"] is not agent
        or hashlib.sha256(presented.encode()).hexdigest() != held["symbols"]["token_hash"]
        or environ.get("HTTP_X_LEASE_EPOCH") != str(held["symbols"]["epoch"])
    ):
        return _refuse(start_response, 409, "LEASE_NOT_HELD")
    assert matched is not None
    name = matched.group(2)
    symbols = held["symbols"]
    spec = OPS[name]
    spec.raw_inputs(symbols, raw)
    if spec.derive is not None:
        spec.derive(symbols)
    if raw.run(TRACES[name], symbols, spec.derive) != "ok":
        return _refuse(start_response, 409, "LEASE_NOT_HELD")
    if name == "finish":
        HELD.pop(int(matched.group(1)), None)
    fill = {**symbols, "now_iso": _iso(now), "expires_iso": _iso(now + timedelta(seconds=ops.LEASE_SECONDS))}
    return _answer(start_response, name, fill)
