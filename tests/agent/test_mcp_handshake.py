"""`leasehold mcp` answers `initialize` before it imports the MCP SDK (SPEC §24; `agent.mcp.handshake`): the
early answer is the SDK's own, byte for byte as JSON, for every protocol version a client may ask for, and the
SDK then serves the rest of the conversation. The CPU it costs is a bench row (`bench --only agent`), not a
timed test; tests/agent/test_mcp.py drives the whole server with the SDK's client."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from agent.mcp import handshake
from tests.agent.live import REPO


def converse(logged_in: dict[str, str], *messages: dict) -> tuple[list[dict], str]:
    """Send `messages` to a fresh `leasehold mcp`; its answers (in order) and its stderr.

    Stdin stays open until every request (a message with an id) is answered, or 30 s pass: the SDK may
    drop requests still queued when its stdin ends, which a test must not mistake for the relay's doing.
    """
    expected = sum(1 for message in messages if "id" in message)
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "mcp", "--no-keep-alive", "--keep-on-exit"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=logged_in,
        cwd=REPO,
        text=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write("".join(json.dumps(message) + "\n" for message in messages))
    process.stdin.flush()
    answers: list[dict] = []
    deadline = time.monotonic() + 30
    while len(answers) < expected and time.monotonic() < deadline:
        if not select.select([process.stdout], [], [], 0.5)[0]:
            continue
        line = process.stdout.readline()
        if not line:
            break
        answers.append(json.loads(line))
    process.stdin.close()
    rest = process.stdout.read()
    assert process.stderr is not None
    stderr = process.stderr.read()
    process.wait(timeout=60)
    answers += [json.loads(line) for line in rest.splitlines() if line.strip()]
    assert process.returncode == 0, stderr
    return answers, stderr


def initialize(version: str, request_id: int | str = 1) -> dict:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_the_handshake_versions_are_the_sdks():
    assert tuple(HANDSHAKE_PROTOCOL_VERSIONS) == handshake.HANDSHAKE_PROTOCOL_VERSIONS


# An unknown version is negotiated by the SDK itself (not answered early).
@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_the_early_answer_is_the_sdks_own(logged_in, version):
    # A ping first: nothing is answered early, so the SDK answers the initialize that follows itself.
    ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    sdk_answers, _ = converse(logged_in, ping, initialize(version), INITIALIZED)
    [sdk] = [answer for answer in sdk_answers if answer.get("id") == 1]
    early_answers, stderr = converse(logged_in, initialize(version), INITIALIZED, TOOLS_LIST)
    assert early_answers[0] == sdk  # the first line out, and the SDK's answer to the same request
    assert early_answers[0]["result"] == handshake.initialize_result(initialize(version)["params"])
    assert "differs" not in stderr
    # The SDK's own answer to the initialize is not sent a second time; the conversation goes on.
    assert [answer.get("id") for answer in early_answers] == [1, 2]
    assert {tool["name"] for tool in early_answers[1]["result"]["tools"]} >= {"claim", "finish", "note"}


@pytest.mark.parametrize(
    "first",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    ],
)
def test_a_first_message_that_is_not_a_valid_initialize_is_left_to_the_sdk(logged_in, first):
    answers, stderr = converse(logged_in, first)
    assert len(answers) == 1
    assert answers[0]["id"] == 1
    assert "result" not in answers[0] or "protocolVersion" not in answers[0]["result"]
    assert "differs" not in stderr


def test_a_string_id_is_answered_early_and_the_sdk_goes_on(logged_in):
    answers, _ = converse(logged_in, initialize("2025-06-18", request_id="init-1"), INITIALIZED, TOOLS_LIST)
    assert [answer.get("id") for answer in answers] == ["init-1", 2]


RELAY_ECHO = """
import asyncio, os, sys
from agent.mcp.handshake import answer_initialize_early

relay = answer_initialize_early()

async def echo():
    async for line in relay.stdin:
        await relay.stdout.write(line)
        await relay.stdout.flush()
        os.write(1, b"stray write\\n")
        print("stray print", flush=True)

asyncio.run(echo())
relay.finish()
print("after finish", flush=True)
"""


def test_the_relay_hands_every_line_on_in_order_and_keeps_stray_output_off_the_wire(logged_in):
    """The SDK's streams (`handshake.Relay`): the line read early first, then the rest of stdin, each line once
    and in order; the end of stdin ends them. What else the process writes to fd 1 goes to stderr, until
    `finish` gives the wire back."""
    lines = [
        json.dumps(initialize("2025-06-18")),
        *(json.dumps({"n": index, "text": "é" * index}) for index in range(50)),
    ]
    done = subprocess.run(
        [sys.executable, "-c", RELAY_ECHO],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=logged_in,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    out = done.stdout.splitlines()
    assert json.loads(out[0])["result"]["serverInfo"]["name"] == "leasehold"  # the early answer
    assert out[1:-1] == lines  # the SDK's side: the initialize (a request, never dropped) and every line after
    assert out[-1] == "after finish"
    assert done.stderr.count("stray write") == done.stderr.count("stray print") == len(lines)
