"""Environment providers without a server (SPEC §23.3): the config, provision's JSON, deadlines, the ledger."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.runner.provider_commands import ProviderError, provisioned_from, run_command
from agent.runner.providers import ProviderConfigError, Providers, Sandbox, provider_specs


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


# --- the config ------------------------------------------------------------------------------


def test_a_provider_table_becomes_argv_lists_with_a_default_deadline():
    specs = provider_specs(
        {
            "database": {"provision": "/srv/make-db --fast", "teardown": ["/srv/drop db"]},
            "sandbox": {"provision": ["mk"], "teardown": "rm-it", "timeout_seconds": 2.5},
        }
    )
    assert specs["database"].provision == ["/srv/make-db", "--fast"]
    assert specs["database"].teardown == ["/srv/drop db"]
    assert specs["database"].timeout_seconds == 300
    assert specs["sandbox"].timeout_seconds == 2.5


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"provision": "a", "teardown": "b", "timeout": 5}, "'timeout'"),
        ({"teardown": "b"}, "provision"),
        ({"provision": "a", "teardown": []}, "teardown"),
        ({"provision": "a", "teardown": ["b", 3]}, "teardown"),
        ({"provision": "a", "teardown": "b", "timeout_seconds": 0}, "timeout_seconds"),
        ({"provision": "a", "teardown": "b", "timeout_seconds": True}, "timeout_seconds"),
        ("make-db", "must be a table"),
    ],
)
def test_a_bad_provider_table_is_an_error_naming_the_key(table, named):
    with pytest.raises(ProviderConfigError) as refused:
        provider_specs({"database": table})
    assert "[providers.database]" in str(refused.value)
    assert named in str(refused.value)


# --- what provision prints ----------------------------------------------------------------------


def test_provisions_json_is_taken_field_by_field_and_nulls_are_left_out():
    printed = json.dumps(
        {
            "database_url": "postgres://app@127.0.0.1:5432/lh_7",
            "ports": [8007, 9007],
            "container": "lh-7",
            "host_path": "/srv/sandboxes/7",
        }
    )
    assert provisioned_from(printed)["ports"] == [8007, 9007]
    assert provisioned_from('{"container": "lh-7", "host_path": null}') == {"container": "lh-7"}
    assert provisioned_from("{}") == {}


@pytest.mark.parametrize(
    ("printed", "says"),
    [
        ("", "no JSON object"),
        ("created lh_7\n", "no JSON object"),
        ('["postgres://app@db/lh_7"]', "not an object"),
        ('{"database_url": "postgres://app@db/x", "password": "s3cret"}', "unknown fields password"),
        ('{"database_url": "postgres://app:s3cret@db/x"}', "without a password"),
        ('{"database_url": "lh_7"}', "database_url"),
        ('{"ports": "8000"}', "ports"),
        ('{"ports": [70000]}', "ports"),
        ('{"ports": [true]}', "ports"),
        ('{"container": ""}', "container"),
        ('{"host_path": "relative/7"}', "host_path"),
        ('{"host_path": "/srv/\\u0000"}', "host_path"),
    ],
)
def test_anything_else_is_a_provider_error(printed, says):
    with pytest.raises(ProviderError) as refused:
        provisioned_from(printed)
    assert says in str(refused.value)


# --- running a command ---------------------------------------------------------------------------


def test_a_command_gets_the_attempts_names_and_the_allocation_but_never_a_token(tmp_path, monkeypatch):
    monkeypatch.setenv("LEASEHOLD_TOKEN", "lh_agent_secret")
    monkeypatch.setenv("LEASEHOLD_ATTEMPT_TOKEN", "lha_1_secret")
    seen = tmp_path / "seen"
    command = script(tmp_path / "provision", f'env > "{seen}.env"\ncat > "{seen}.stdin"\necho "{{}}"\n')
    finished = run_command(
        [str(command)],
        stdin={"task": "AGT-1", "attempt_id": 7},
        variables={"LEASEHOLD_TASK": "AGT-1", "LEASEHOLD_ATTEMPT_ID": "7"},
        timeout_seconds=30,
        what="provision",
    )
    assert finished.stdout.strip() == "{}"
    environment = Path(f"{seen}.env").read_text()
    assert "LEASEHOLD_TASK=AGT-1" in environment
    assert "LEASEHOLD_ATTEMPT_ID=7" in environment
    assert "secret" not in environment
    assert json.loads(Path(f"{seen}.stdin").read_text()) == {"task": "AGT-1", "attempt_id": 7}


def test_a_failing_command_reports_its_exit_status_and_stderr_tail(tmp_path):
    command = script(tmp_path / "provision", 'echo "quota exceeded for lh_7" >&2\nexit 4\n')
    with pytest.raises(ProviderError) as failed:
        run_command([str(command)], stdin={}, variables={}, timeout_seconds=30, what="provision (database)")
    assert "exited with status 4" in str(failed.value)
    assert failed.value.stderr_tail == "quota exceeded for lh_7"


def test_a_command_that_cannot_start_is_a_provider_error(tmp_path):
    with pytest.raises(ProviderError) as failed:
        run_command([str(tmp_path / "missing")], stdin={}, variables={}, timeout_seconds=30, what="provision")
    assert "could not start" in str(failed.value)


def test_a_command_past_its_deadline_is_killed_with_everything_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    command = script(tmp_path / "provision", f'sleep 60 &\necho $! > "{pid_file}"\necho "making" >&2\nwait\n')
    started = time.monotonic()
    with pytest.raises(ProviderError) as failed:
        run_command([str(command)], stdin={}, variables={}, timeout_seconds=1, what="provision")
    assert time.monotonic() - started < 10
    assert "did not finish within 1 s" in str(failed.value)
    assert failed.value.stderr_tail == "making"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)  # its background `sleep` went with it (same process group)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


# --- the ledger: release and leftovers -------------------------------------------------------------


def _recorded(state_dir: Path, attempt_id: int, kind: str, sandbox: Path) -> None:
    ledger = state_dir / "providers"
    ledger.mkdir(parents=True, exist_ok=True)
    allocation = {"task": "AGT-9", "attempt_id": attempt_id, "epoch": 1, "environment": {"name": "e", "kind": kind}}
    record = {
        "attempt_id": attempt_id,
        "task": "AGT-9",
        "kind": kind,
        "allocation": allocation,
        "provisioned": {"host_path": str(sandbox)},
        "teardown": [],
    }
    (ledger / f"{attempt_id}.json").write_text(json.dumps(record))


def test_a_failed_teardown_keeps_the_record_for_the_next_start(tmp_path):
    sandbox = tmp_path / "sandbox-5"
    sandbox.mkdir()
    broken = script(tmp_path / "drop", 'echo "device busy" >&2\nexit 1\n')
    working = tmp_path / "drop-ok"
    working.write_text(
        f"#!{sys.executable}\nimport json, shutil, sys\n"
        "shutil.rmtree(json.load(sys.stdin)['provisioned']['host_path'])\n"
    )
    working.chmod(0o755)
    state_dir = tmp_path / "state"
    _recorded(state_dir, 5, "sandbox", sandbox)
    tables = {"sandbox": {"provision": "true", "teardown": [str(broken)]}}
    assert Providers.from_config(tables, state_dir=state_dir, log=lambda _: None).release(5) is False
    assert sandbox.is_dir()
    assert (state_dir / "providers" / "5.json").exists()
    tables = {"sandbox": {"provision": "true", "teardown": [str(working)]}}
    restarted = Providers.from_config(tables, state_dir=state_dir, log=lambda _: None)
    assert restarted.teardown_leftovers({5}) == []  # still held: kept
    assert restarted.teardown_leftovers(set()) == [5]
    assert not sandbox.exists()
    assert restarted.recorded() == []
    assert restarted.release(5) is True  # nothing left: nothing to do


def test_the_sandbox_gives_the_variables_run_sets_from_the_context():
    sandbox = Sandbox(
        attempt_id=3,
        task="AGT-3",
        kind="database",
        environment="preview-db-1",
        provisioned={"database_url": "postgres://app@db/lh_3", "ports": [8003, 9003], "container": "lh-3"},
    )
    assert sandbox.variables() == {
        "LEASEHOLD_ENV_NAME": "preview-db-1",
        "LEASEHOLD_ENV_DATABASE_URL": "postgres://app@db/lh_3",
        "LEASEHOLD_ENV_CONTAINER": "lh-3",
        "LEASEHOLD_ENV_PORTS": "8003,9003",
        "LEASEHOLD_ENV_PORT": "8003",
    }
