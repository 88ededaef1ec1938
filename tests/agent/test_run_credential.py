"""The command's credential under `leasehold run` (SPEC §23.2), against a live server: the command gets
`LEASEHOLD_ATTEMPT_TOKEN` and never the agent's token; the CLI inside it uses that token, which does the
attempt's own calls, is refused elsewhere, and is dead once the attempt has ended."""

from __future__ import annotations

import json
import sys
import textwrap

import httpx
import pytest

from agent.cli.output import EXIT_AUTH, EXIT_OK
from tests.agent.live import REPO, leasehold

# What the command does with its environment: records it, works through the CLI, then tries its credential
# where it must not reach. Each probe is (name, method, path, body); the answers go to a JSON file.
CHILD = """
import json, os, subprocess, sys
import httpx

results = {"env": dict(os.environ), "argv": sys.argv, "cli": {}, "http": {}}
def cli(name, *args):
    done = subprocess.run([sys.executable, "-m", "agent", "--json", *args], capture_output=True, text=True,
                          cwd=REPO)
    results["cli"][name] = {"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
cli("checkpoint", "checkpoint", "from the command", "--next-step", "finish")
cli("renew", "renew")
cli("context", "context")
cli("task_show", "task", "show", os.environ["LEASEHOLD_TASK"])
cli("ready", "ready")
cli("claim_next", "claim", "--next")
api = os.environ["LEASEHOLD_URL"].rstrip("/") + "/api/v1"
headers = {"Authorization": "Bearer " + os.environ["LEASEHOLD_ATTEMPT_TOKEN"]}
for name, method, path, body in PROBES:
    answer = httpx.request(method, api + path, headers=headers, json=body)
    results["http"][name] = {"status": answer.status_code, "body": answer.json() if answer.content else None}
json.dump(results, open(OUT, "w"))
"""


def test_the_command_gets_its_attempt_token_and_never_the_agents(fleet, api, logged_in, tmp_path):
    # Logged in by the environment as well as by the config file: neither token may reach the command.
    env = {**logged_in, "LEASEHOLD_TOKEN": fleet.token, "LEASEHOLD_URL": fleet.server.url}
    key = fleet.ready_task()
    elsewhere = api.claim(fleet.ready_task())  # the same agent's other attempt
    other_task = fleet.ready_task()
    out = tmp_path / "seen.json"
    probes = [
        ("claim_next", "POST", "/claims/next/", {"project": fleet.project}),
        ("claim_task", "POST", f"/tasks/{other_task}/claim/", {}),
        ("other_attempt", "GET", f"/attempts/{elsewhere.lease.attempt_id}/", None),
        ("other_attempt_note", "POST", f"/attempts/{elsewhere.lease.attempt_id}/notes/",
         {"kind": "progress", "content": "not mine"}),
        ("other_task_text", "GET", f"/tasks/{other_task}/text/", None),
        ("heartbeat", "POST", "/agents/me/heartbeat/", {}),
    ]  # fmt: skip
    child = f"REPO = {str(REPO)!r}\nOUT = {str(out)!r}\nPROBES = {probes!r}\n" + textwrap.dedent(CHILD)
    done = leasehold("--json", "run", key, "--", sys.executable, "-c", child, env=env, timeout=120)
    assert done.returncode == EXIT_OK, done.stderr
    seen = json.loads(out.read_text())

    token = seen["env"].get("LEASEHOLD_ATTEMPT_TOKEN", "")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert token.startswith(f"lha_{result['attempt']}_")
    assert "LEASEHOLD_TOKEN" not in seen["env"]
    assert not any(fleet.token in value for value in [*seen["env"].values(), *seen["argv"]])
    assert seen["env"]["LEASEHOLD_URL"] == fleet.server.url.rstrip("/")

    # The CLI inside used the attempt token: the attempt's calls worked, the agent's calls were refused.
    for name in ("checkpoint", "renew", "context", "task_show"):
        assert seen["cli"][name]["code"] == EXIT_OK, (name, seen["cli"][name])
    for name in ("ready", "claim_next"):
        assert seen["cli"][name]["code"] == EXIT_AUTH, (name, seen["cli"][name])
        assert "PERMISSION_DENIED" in seen["cli"][name]["stdout"] + seen["cli"][name]["stderr"]
    assert api.context(key)["latest_checkpoint"]["content"] == "from the command"
    for name, answer in seen["http"].items():
        assert answer["status"] == 403, (name, answer)
        assert answer["body"]["error"]["code"] == "PERMISSION_DENIED"
    assert api.attempt(elsewhere.lease.attempt_id)["notes_total"] == 0

    # The run finished the attempt: its token is dead for every call.
    assert api.attempt(result["attempt"])["status"] == "completed"
    dead = {"Authorization": f"Bearer {token}"}
    base = fleet.server.url.rstrip("/") + "/api/v1"
    for method, path in (("GET", f"/tasks/{key}/text/"), ("POST", f"/attempts/{result['attempt']}/renew/")):
        answer = httpx.request(method, base + path, headers=dead, json={} if method == "POST" else None)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "AUTHENTICATION_FAILED"


def _command_environment(monkeypatch, tmp_path, **extra: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"url": "http://config.test", "token": "lh_from-the-config-file"}))
    monkeypatch.setenv("LEASEHOLD_CONFIG", str(config))
    monkeypatch.setenv("LEASEHOLD_TOKEN", "lh_from-the-environment")
    for name, value in {
        "LEASEHOLD_ATTEMPT_TOKEN": "lha_12_secret",
        "LEASEHOLD_URL": "http://ledger.test",
        "LEASEHOLD_ATTEMPT_ID": "12",
        "LEASEHOLD_TASK": "WEB-3",
        "LEASEHOLD_EPOCH": "4",
        "LEASEHOLD_LABEL": "owner=agent-07;branch=feature/web-3",
        **extra,
    }.items():
        monkeypatch.setenv(name, value)


def test_with_an_attempt_token_the_cli_uses_it_and_no_agent_token(monkeypatch, tmp_path):
    from agent.workspace.config import CommandAttempt, load_settings

    _command_environment(monkeypatch, tmp_path)
    settings = load_settings()
    assert settings.token == "lha_12_secret"
    assert settings.url == "http://ledger.test"
    assert settings.attempt == CommandAttempt(
        attempt_id=12, task="WEB-3", epoch=4, label="owner=agent-07;branch=feature/web-3"
    )


def test_an_attempt_token_without_its_attempt_is_not_a_login(monkeypatch, tmp_path):
    from agent.workspace.config import NotLoggedIn, load_settings

    _command_environment(monkeypatch, tmp_path, LEASEHOLD_EPOCH="")
    with pytest.raises(NotLoggedIn, match="LEASEHOLD_EPOCH"):
        load_settings()


def test_the_commands_holder_calls_send_the_attempt_token_and_no_lease_headers(monkeypatch, tmp_path):
    from agent.client import LeaseholdClient
    from agent.workspace.session import COMMAND_OWNER, current_attempt

    _command_environment(monkeypatch, tmp_path)
    from agent.workspace.config import load_settings

    settings = load_settings()
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json={"note": {"id": 1}, "lease_expires_at": "2030-01-01T00:00:00+00:00"})

    with LeaseholdClient(settings.url, settings.token, transport=httpx.MockTransport(answer)) as client:
        held = current_attempt(settings, client)
        assert held is not None
        assert held.owner == COMMAND_OWNER
        assert (held.task, held.attempt_id, held.epoch, held.agent) == ("WEB-3", 12, 4, "agent-07")
        assert current_attempt(settings, client, task="WEB-9") is None
        client.note(held.lease, "progress", kind="progress")
    (request,) = sent
    assert request.url.path == "/api/v1/attempts/12/notes/"
    assert request.headers["Authorization"] == "Bearer lha_12_secret"
    assert "X-Lease-Token" not in request.headers
    assert "X-Lease-Epoch" not in request.headers
