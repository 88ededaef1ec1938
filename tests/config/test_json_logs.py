"""LEASEHOLD_LOG_FORMAT=json (SPEC §18): a real server's output is JSON lines with request ids, and no token.

A busy flow — claims, notes, renewals, finishes, a refused write, a bad
token — against `manage.py serve`; then every line of its output must parse
as JSON, the request lines must carry their id (also answered as
X-Request-Id), agent, attempt, code and duration, and not one token issued
during the run (agent tokens, lease tokens, a webhook secret) may appear.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.served import manage, server_database, serving

pytestmark = pytest.mark.slow


def call(url, method, path, token, body=None, **headers):
    request = urllib.request.Request(  # noqa: S310 - our own server on loopback
        f"{url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own server on loopback
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read() or b"null")


def test_a_busy_run_logs_json_lines_with_request_ids_and_never_a_token(tmp_path):
    with server_database(tmp_path, "h19_logs") as env:
        env["LEASEHOLD_LOG_FORMAT"] = "json"
        env["LEASEHOLD_WEBHOOK_ALLOW_PRIVATE"] = "1"
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_project", "web", "--name", "Web")
        tokens = [
            manage(env, "create_agent", f"busy-{n}", "--kind", "script", "--project", "web").strip().splitlines()[-1]
            for n in range(3)
        ]
        secrets = [manage(env, "create_webhook", "http://127.0.0.1:9/hook").strip().splitlines()[-1]]
        log = tmp_path / "serve.log"
        request_ids: list[str] = []
        attempts: list[int] = []
        with serving(env, log, workers=1, threads=4) as server:
            for round_number in range(3):
                for token in tokens:
                    status, _, task = call(
                        server.url,
                        "POST",
                        "/api/v1/tasks/",
                        token,
                        {"project": "web", "title": f"t{round_number}", "status": "ready"},
                    )
                    assert status == 201
                    status, headers, claim = call(server.url, "POST", f"/api/v1/tasks/{task['key']}/claim/", token, {})
                    assert status == 201
                    request_ids.append(headers["X-Request-Id"])
                    secrets.append(claim["lease_token"])
                    attempts.append(claim["attempt"]["id"])
                    holder = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}
                    attempt = f"/api/v1/attempts/{claim['attempt']['id']}"
                    assert call(server.url, "POST", f"{attempt}/renew/", token, {}, **holder)[0] == 200
                    note = {"kind": "checkpoint", "content": "half way"}
                    assert call(server.url, "POST", f"{attempt}/notes/", token, note, **holder)[0] == 201
                    wrong = {**holder, "X-Lease-Token": "x" * 43}
                    assert call(server.url, "POST", f"{attempt}/renew/", token, {}, **wrong)[0] == 409
                    assert (
                        call(server.url, "POST", f"{attempt}/finish/", token, {"outcome": "done"}, **holder)[0] == 200
                    )
            status, headers, _ = call(
                server.url, "GET", "/api/v1/projects/", "lh_" + "A" * 43, **{"X-Request-Id": "mine-1"}
            )
            assert status == 401
            assert headers["X-Request-Id"] == "mine-1"
        output = log.read_text()
    lines = [line for line in output.splitlines() if line.strip()]
    entries = []
    for line in lines:
        entries.append(json.loads(line))  # every line is one JSON object
    for secret in [*tokens, *secrets]:
        assert secret not in output
    requests = [e for e in entries if e["logger"] == "leasehold.request"]
    assert {e["request_id"] for e in requests} >= set(request_ids) | {"mine-1"}
    claims = [e for e in requests if e["path"].endswith("/claim/")]
    assert {e["attempt"] for e in claims} == set(attempts)
    assert all(e["agent"].startswith("busy-") and e["duration_ms"] >= 0 for e in claims)
    refused = [e for e in requests if e.get("code") == "INVALID_LEASE_TOKEN"]
    assert len(refused) == 9
    assert {e["attempt"] for e in refused} == set(attempts)
    assert any(e.get("code") == "AUTHENTICATION_FAILED" and e["request_id"] == "mine-1" for e in requests)
