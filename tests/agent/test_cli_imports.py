"""A `leasehold` CLI call imports only what it uses (issue 29, SPEC §24: ≤ 150 ms of CPU per call): a plain
`leasehold note` loads no MCP SDK, pydantic, httpx (whose CLI module pulls in rich and click), yaml, nor the
parts of the toolkit it does not run (the MCP server, `run`'s supervisor, `connect`)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.agent.live import REPO, leasehold

# Third-party packages (and the heavy standard ones) a holder command has no use for.
FORBIDDEN_PACKAGES = ("mcp", "mcp_types", "pydantic", "pydantic_core", "rich", "click", "httpx", "httpcore",
                      "anyio", "starlette", "pygments", "yaml", "certifi", "ctypes", "asyncio")  # fmt: skip
FORBIDDEN_TOOLKIT = ("agent.mcp.server", "agent.mcp.tools", "agent.mcp.holdings", "agent.cli.run",
                     "agent.cli.run_end", "agent.client.keeper", "agent.workspace.supervise")  # fmt: skip

DUMP = """
import atexit, json, sys
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(sorted(sys.modules))))
from agent.cli import main
code = main(sys.argv[2:])
sys.stdout.flush()
raise SystemExit(code)
"""


def modules_of(env: dict[str, str], tmp_path, *args: str) -> set[str]:
    dump = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", DUMP, str(dump), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(dump.read_text()))


def test_a_plain_note_imports_neither_the_mcp_sdk_nor_httpx_nor_the_run_supervisor(fleet, logged_in, tmp_path):
    key = fleet.ready_task()
    assert leasehold("claim", key, env=logged_in).returncode == 0
    loaded = modules_of(logged_in, tmp_path, "note", "imports are cheap now")
    assert "agent.client.wire" in loaded  # the call did go over the wire
    heavy = sorted(name for name in loaded if name.split(".")[0] in FORBIDDEN_PACKAGES)
    assert heavy == []
    assert sorted(loaded & set(FORBIDDEN_TOOLKIT)) == []
    assert leasehold("release", env=logged_in).returncode == 0


def test_the_hooks_and_ready_stay_as_light(fleet, logged_in, tmp_path):
    for args in (("ready",), ("hook", "session-start")):
        loaded = modules_of(logged_in, tmp_path, *args)
        assert sorted(name for name in loaded if name.split(".")[0] in FORBIDDEN_PACKAGES) == [], args
        assert sorted(loaded & set(FORBIDDEN_TOOLKIT)) == [], args
