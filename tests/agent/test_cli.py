"""The `leasehold` CLI: help and exit codes, login and its 0600 config file, the holder commands."""

from __future__ import annotations

import argparse
import ast
import json
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent import cli
from agent.cli import output
from tests.agent.live import REPO, agent_env, leasehold, state_files

SUBCOMMANDS = {
    "login",
    "ready",
    "claim",
    "context",
    "note",
    "checkpoint",
    "renew",
    "finish",
    "release",
    "changes",
    "search",
    "plan",
    "run",
    "workspace",
    "mcp",
    "task",
    "git",
    "block",
    "unblock",
    "connect",
    "hook",
    "review",
    "decide",
    "comment",
    "land",
    "landing",
    "check",
    "runner",
}
EXIT_CODES = {
    name: value for name, value in vars(output).items() if name.startswith("EXIT_") and isinstance(value, int)
}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_has_help_text_and_help_exits_0(capsys):
    commands = subparsers()
    assert set(commands) == SUBCOMMANDS
    for name, parser in commands.items():
        assert parser.description, name
        with pytest.raises(SystemExit) as exited:
            cli.main([name, "--help"])
        assert exited.value.code == 0, name
        shown = capsys.readouterr().out
        assert f"leasehold {name}" in shown
        assert "exit codes:" in shown


def test_the_console_script_entry_point_answers_help():
    done = subprocess.run(
        [sys.executable, "-m", "agent", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    for name in SUBCOMMANDS:
        assert name in done.stdout


def test_every_exit_code_is_documented_in_the_help_and_in_docs():
    documented_help = {int(code) for code in re.findall(r"^  ([0-9]+) ", output.EXIT_CODES_HELP, re.MULTILINE)}
    docs = (REPO / "docs" / "agents.md").read_text()
    documented_docs = {int(code) for code in re.findall(r"^\| `([0-9]+)` \|", docs, re.MULTILINE)}
    assert set(EXIT_CODES.values()) <= documented_help
    assert set(EXIT_CODES.values()) <= documented_docs
    assert "leasehold mcp --print-config" in docs


def test_the_toolkit_imports_none_of_the_server():
    probe = (
        "import sys, pkgutil, importlib, agent; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(agent.__path__, 'agent.')]; "
        "import mcp.server.mcpserver; "
        "server = ('django', 'config', 'ledger', 'leases', 'environments'); "
        "print([name for name in sys.modules if name.split('.')[0] in server])"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    for source in (REPO / "agent").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    assert name.split(".")[0] not in {"django", "config", "ledger", "leases", "environments"}, source


def test_login_verifies_the_token_and_stores_it_with_mode_0600(fleet, tmp_path):
    env = agent_env(tmp_path)
    config = Path(env["LEASEHOLD_CONFIG"])
    refused = leasehold("login", fleet.server.url, "--token", "lh_not-a-token", env=env)
    assert refused.returncode == output.EXIT_AUTH
    assert "AUTHENTICATION_FAILED" in refused.stderr
    assert not config.exists()

    done = leasehold("--json", "login", fleet.server.url + "/api/v1/", "--token", fleet.token, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["projects"] == [fleet.project]
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    stored = json.loads(config.read_text())
    assert stored == {"url": fleet.server.url, "token": fleet.token, "project": fleet.project}
    assert fleet.token not in done.stdout


def test_not_logged_in_is_the_auth_exit_code(tmp_path):
    done = leasehold("ready", env=agent_env(tmp_path))
    assert done.returncode == output.EXIT_AUTH
    assert "login" in done.stderr


def test_claim_note_checkpoint_finish_through_the_state_file(fleet, api, logged_in):
    key = fleet.ready_task()
    listed = leasehold("--json", "ready", env=logged_in)
    assert key in [task["key"] for task in json.loads(listed.stdout)["results"]]

    claimed = leasehold("claim", key, "--json", env=logged_in)
    assert claimed.returncode == 0, claimed.stderr
    summary = json.loads(claimed.stdout)
    assert summary["task"] == key
    [state_file] = state_files(logged_in)
    assert state_file.name == f"{key}.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(state_file.parent.stat().st_mode) == 0o700
    token = json.loads(state_file.read_text())["lease_token"]
    assert token not in claimed.stdout + claimed.stderr

    assert leasehold("claim", fleet.ready_task(), env=logged_in).returncode == output.EXIT_USAGE  # one at a time
    assert leasehold("checkpoint", "tests written", "--next-step", "docs", env=logged_in).returncode == 0
    assert leasehold("note", "flaky fixture", "--kind", "finding", env=logged_in).returncode == 0
    context = leasehold("context", env=logged_in)
    assert "tests written" in context.stdout
    finished = leasehold("--json", "finish", "--summary", "done by the CLI", env=logged_in)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["task"]["status"] == "done"
    assert not state_file.exists()
    assert api.attempt(summary["attempt"])["notes_total"] == 2

    after = leasehold("note", "nothing held", env=logged_in)
    assert after.returncode == output.EXIT_USAGE


def test_exit_codes_of_claims(fleet, api, logged_in):
    nothing = leasehold("claim", "--next", "--task-class", "no-such-class", env=logged_in)
    assert nothing.returncode == output.EXIT_NOTHING_CLAIMABLE
    key = fleet.ready_task()
    api.claim(key)
    taken = leasehold("--json", "claim", key, env=logged_in)
    assert taken.returncode == output.EXIT_TASK_TAKEN
    assert json.loads(taken.stdout)["error"]["code"] == "TASK_TAKEN"
    assert leasehold("run", key, env=logged_in).returncode == output.EXIT_USAGE  # no command after --
