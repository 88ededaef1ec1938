"""`runner.toml` (SPEC §23.1, `agent.runner.config`): what is accepted, what each default is, and that every
mistake is refused with a message naming the key and its table, before anything is registered or claimed."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from agent.runner.config import (
    DEFAULT_DRAIN_GRACE_SECONDS,
    DEFAULT_WAIT_SECONDS,
    ConfigError,
    load_config,
)
from agent.runner.daemon import read_token
from tests.agent.gitrepos import make_repos
from tests.agent.live import agent_env, leasehold


@pytest.fixture
def clone(tmp_path) -> Path:
    return make_repos(tmp_path / "git", with_remote=False).clone


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runner.toml"
    path.write_text(textwrap.dedent(text))
    return path


def minimal(clone: Path, extra: str = "", project: str = "") -> str:
    return f"""
        server = "http://127.0.0.1:8000/"
        token_file = "runner.token"
        {extra}
        [projects.web]
        repository = "{clone}"
        command = ["claude", "-p", "Work on {{task}}; read {{context_file}}"]
        {project}
    """


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    return str(caught.value)


def test_a_minimal_config_gets_the_documented_defaults(tmp_path, clone):
    config = load_config(write(tmp_path, minimal(clone)))

    assert config.server == "http://127.0.0.1:8000"
    assert config.token_file == tmp_path / "runner.token"  # relative to the config file
    assert config.drain_grace_seconds == DEFAULT_DRAIN_GRACE_SECONDS == 600
    assert config.wait_seconds == DEFAULT_WAIT_SECONDS == 60
    assert config.state_dir is None
    web = config.projects["web"]
    assert web.repository == clone.resolve()
    assert web.landing_slots == 0
    assert web.lease_seconds is None
    assert web.environment_kind is None
    assert web.commands == {}
    assert config.providers == {}


def test_the_default_state_dir_is_under_xdg_state_home_by_runner_name(tmp_path, clone, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = load_config(write(tmp_path, minimal(clone)))

    assert config.state_dir_for("gpu-box") == tmp_path / "state" / "leasehold-runner" / "gpu-box"


def test_a_full_config_reads_classes_landing_lease_and_providers(tmp_path, clone):
    config = load_config(
        write(
            tmp_path,
            minimal(
                clone,
                extra='state_dir = "/var/lib/lr"\ndrain_grace_seconds = 30\nwait_seconds = 20',
                project=textwrap.dedent(
                    """
                    commands = { docs = ["codex", "exec", "Document {task}"], script = ["./do-it.sh", "{worktree}"] }
                    landing_slots = 1
                    lease_seconds = 900
                    environment_kind = "database"
                    [providers.preview-db]
                    provision = "/srv/make-db --size small"
                    teardown = ["/srv/drop-db"]
                    """
                ),
            ),
        )
    )

    web = config.projects["web"]
    assert web.command_for("docs") == ["codex", "exec", "Document {task}"]
    assert web.command_for("script") == ["./do-it.sh", "{worktree}"]
    assert web.command_for("") == web.command_for("unknown") == web.command
    assert (web.landing_slots, web.lease_seconds, web.environment_kind) == (1, 900, "database")
    assert config.landing_slots == 1
    assert (config.state_dir, config.drain_grace_seconds, config.wait_seconds) == (Path("/var/lib/lr"), 30.0, 20)
    provider = config.providers["preview-db"]
    assert provider.provision == ["/srv/make-db", "--size", "small"]
    assert provider.teardown == ["/srv/drop-db"]


@pytest.mark.parametrize(
    ("extra", "project", "expected"),
    [
        ("colour = 'blue'", "", "the top level: 'colour' is not a key the runner knows"),
        ("", "landing = true", "[projects.web]: 'landing' is not a key the runner knows"),
        ("wait_seconds = 61", "", "'wait_seconds' must be at most 60"),
        ("wait_seconds = true", "", "'wait_seconds' must be an integer"),
        ("drain_grace_seconds = -1", "", "'drain_grace_seconds' must be at least 0"),
        ("drain_grace_seconds = '10m'", "", "'drain_grace_seconds' must be a number"),
        ("", "landing_slots = 1.5", "[projects.web]: 'landing_slots' must be an integer"),
        ("", "lease_seconds = 0", "[projects.web]: 'lease_seconds' must be at least 1"),
        ("", "environment_kind = ''", "[projects.web]: 'environment_kind' must be a non-empty string"),
        ("", "commands = { docs = [] }", "[projects.web]: 'commands.docs' must be a non-empty list of strings"),
        ("", "commands = { docs = 'codex exec' }", "'commands.docs' must be a non-empty list of strings"),
        ("", "commands = ['codex']", "[projects.web]: 'commands' must be a table"),
        ("", "[providers.db]\nprovision = '/p'", "[providers.db] teardown must be an executable path"),
        ("", "[providers.db]\nprovision = '/p'\nteardown = '/t'\nsize = 1", "[providers.db]: unknown key 'size'"),
    ],
)
def test_each_mistake_is_refused_naming_the_key_and_its_table(tmp_path, clone, extra, project, expected):
    message = refused(tmp_path, minimal(clone, extra=extra, project=project))

    assert expected in message
    assert str(tmp_path / "runner.toml") in message


def test_the_command_must_be_a_non_empty_argv_with_known_placeholders(tmp_path, clone):
    def with_command(command: str) -> str:
        return f"""
            server = "http://x"
            token_file = "/t"
            [projects.web]
            repository = "{clone}"
            command = {command}
        """

    assert "'command' is required" in refused(tmp_path, with_command("[]").replace("command = []", ""))
    assert "'command' must be a non-empty list" in refused(tmp_path, with_command("[]"))
    assert "'command' must be a non-empty list" in refused(tmp_path, with_command('"claude -p hi"'))
    assert "'command' must be a non-empty list" in refused(tmp_path, with_command('["claude", 3]'))
    assert "names no program" in refused(tmp_path, with_command('["", "x"]'))
    assert "unknown placeholder {taks}" in refused(tmp_path, with_command('["claude", "Work on {taks}"]'))
    ok = load_config(write(tmp_path, with_command('["sh", "-c", "echo {task} {branch} {worktree} {context_file}"]')))
    assert ok.projects["web"].command[0] == "sh"


def test_the_top_level_and_the_repositories_are_checked(tmp_path, clone):
    assert "'server' is required" in refused(tmp_path, minimal(clone).replace('server = "http://127.0.0.1:8000/"', ""))
    assert "must be an http:// or https:// URL" in refused(
        tmp_path, minimal(clone).replace("http://127.0.0.1:8000/", "ledger:8000")
    )
    assert "'token_file' is required" in refused(tmp_path, minimal(clone).replace('token_file = "runner.token"', ""))
    assert "name at least one project" in refused(tmp_path, 'server = "http://x"\ntoken_file = "/t"\n')
    missing = minimal(clone).replace(str(clone), str(tmp_path / "nowhere"))
    assert "[projects.web]: 'repository'" in refused(tmp_path, missing)
    assert "is not a directory" in refused(tmp_path, missing)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "is not a git clone" in refused(tmp_path, minimal(clone).replace(str(clone), str(plain)))
    assert "not valid TOML" in refused(tmp_path, "server = ")
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")


def test_a_token_file_others_may_read_is_refused(tmp_path):
    token = tmp_path / "runner.token"
    token.write_text("lhr_secret\n")
    token.chmod(0o600)
    assert read_token(token) == "lhr_secret"

    for mode in (0o644, 0o640, 0o604):
        token.chmod(mode)
        with pytest.raises(ConfigError, match="lets others read it"):
            read_token(token)
    token.chmod(0o600)
    token.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_token(token)
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600


def test_leasehold_runner_with_a_bad_config_exits_2_naming_the_key(tmp_path, clone):
    path = write(tmp_path, minimal(clone, extra="slots = 4"))
    done = leasehold("runner", "--config", str(path), env=agent_env(tmp_path, trace=False))

    assert done.returncode == 2
    assert "'slots' is not a key the runner knows" in done.stderr
    good = write(tmp_path, minimal(clone))
    checked = leasehold("runner", "--check", "--config", str(good), env=agent_env(tmp_path, trace=False))
    assert checked.returncode == 0, checked.stderr
