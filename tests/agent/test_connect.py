"""`leasehold connect` and `leasehold mcp --print-config` (SPEC §15.3): merged client configurations, absolute paths,
the login checked, a configuration of its own per worktree."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from agent.cli.output import EXIT_AUTH, EXIT_OK, EXIT_USAGE
from tests.agent.live import REPO, agent_env

OTHER_SERVER = {"command": "npx", "args": ["-y", "@example/other-mcp"]}


def leasehold_in(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def a_repository(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "root")
    return path


def test_connect_claude_write_keeps_the_other_servers_and_settings_and_adds_the_hooks(logged_in, tmp_path):
    project = a_repository(tmp_path / "project")
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": OTHER_SERVER}}))
    (project / ".claude").mkdir()
    foreign_hook = {"hooks": [{"type": "command", "command": "echo hello"}]}
    (project / ".claude" / "settings.json").write_text(
        json.dumps({"model": "opus", "hooks": {"SessionStart": [foreign_hook]}, "enabledMcpjsonServers": ["other"]})
    )
    relative = {**logged_in, "LEASEHOLD_CONFIG": os.path.relpath(logged_in["LEASEHOLD_CONFIG"], project)}
    for _ in range(2):  # a second run replaces our entries, never duplicates them
        done = leasehold_in(project, "connect", "claude", "--write", env=relative)
        assert done.returncode == EXIT_OK, done.stderr
        assert "Wrote" in done.stdout

    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["other"] == OTHER_SERVER
    entry = servers["leasehold"]
    assert entry["type"] == "stdio"
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-1] == "mcp"
    assert entry["env"] == {"LEASEHOLD_CONFIG": str(Path(logged_in["LEASEHOLD_CONFIG"]).absolute())}

    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["model"] == "opus"
    assert settings["enabledMcpjsonServers"] == ["other", "leasehold"]
    start = settings["hooks"]["SessionStart"]
    assert start[0] == foreign_hook
    assert len(start) == 2
    commands = {
        event: [hook["command"] for group in groups for hook in group["hooks"]]
        for event, groups in settings["hooks"].items()
    }
    assert commands["SessionStart"][1].endswith(" hook session-start")
    assert [command.split()[-1] for command in commands["PreCompact"]] == ["pre-compact"]
    assert [command.split()[-1] for command in commands["SessionEnd"]] == ["session-end"]
    assert f"LEASEHOLD_CONFIG={Path(logged_in['LEASEHOLD_CONFIG']).absolute()}" in commands["PreCompact"][0]


def test_connect_without_write_prints_and_writes_nothing(logged_in, tmp_path):
    project = a_repository(tmp_path / "project")
    done = leasehold_in(project, "connect", "cursor", env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    assert f"Would write {project / '.cursor' / 'mcp.json'}" in done.stdout
    assert "pass --write" in done.stdout
    assert not (project / ".cursor").exists()
    shown = leasehold_in(project, "--json", "connect", "vscode", env=logged_in)
    [file] = json.loads(shown.stdout)["files"]
    assert file["path"] == str(project / ".vscode" / "mcp.json")
    assert json.loads(file["content"])["servers"]["leasehold"]["type"] == "stdio"


def test_connect_codex_merges_into_config_toml_keeping_comments_and_other_servers(logged_in, tmp_path):
    home = tmp_path / "codex-home"
    home.mkdir()
    original = '# my settings\nmodel = "o4"\n\n[mcp_servers.other]\ncommand = "npx"  # keep me\nargs = ["-y", "x"]\n'
    (home / "config.toml").write_text(original)
    env = {**logged_in, "CODEX_HOME": str(home)}
    done = leasehold_in(tmp_path, "connect", "codex", "--write", "--project", "agt", env=env)
    assert done.returncode == EXIT_OK, done.stderr
    text = (home / "config.toml").read_text()
    assert text.startswith(original)  # what was there stays as it was, comments included
    parsed = tomllib.loads(text)
    assert parsed["model"] == "o4"
    assert parsed["mcp_servers"]["other"] == {"command": "npx", "args": ["-y", "x"]}
    ours = parsed["mcp_servers"]["leasehold"]
    assert Path(ours["command"]).is_absolute()
    assert ours["args"][-3:] == ["mcp", "--project", "agt"]
    assert ours["env"]["LEASEHOLD_CONFIG"] == str(Path(logged_in["LEASEHOLD_CONFIG"]).absolute())


def test_connect_refuses_without_a_login_and_on_a_file_it_cannot_parse(logged_in, tmp_path):
    project = a_repository(tmp_path / "project")
    nobody = agent_env(tmp_path / "nobody")
    done = leasehold_in(project, "connect", "claude", "--write", env=nobody)
    assert done.returncode == EXIT_AUTH
    assert "leasehold login" in done.stderr
    assert done.stderr.count("config.json") == 1  # NOT_LOGGED_IN names the config file once
    assert not (project / ".mcp.json").exists()

    env_only = {**nobody, "LEASEHOLD_URL": "http://127.0.0.1:9", "LEASEHOLD_TOKEN": "lh_x"}
    done = leasehold_in(project, "connect", "claude", env=env_only)
    assert done.returncode == EXIT_AUTH
    assert "environment only" in done.stderr

    (project / ".mcp.json").write_text("{not json")
    done = leasehold_in(project, "connect", "claude", "--write", env=logged_in)
    assert done.returncode == EXIT_USAGE
    assert len(done.stderr.strip().splitlines()) == 1
    assert (project / ".mcp.json").read_text() == "{not json"


def test_connect_worktree_gives_each_worktree_a_config_of_its_own(logged_in, tmp_path):
    repo = a_repository(tmp_path / "repo")
    worktree = tmp_path / "repo.worktrees" / "AGT-1"
    git(repo, "worktree", "add", "-q", "-b", "feature/one", str(worktree))
    done = leasehold_in(tmp_path, "connect", "claude", "--write", "--worktree", str(worktree), env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    entry = json.loads((worktree / ".mcp.json").read_text())["mcpServers"]["leasehold"]
    own = Path(entry["env"]["LEASEHOLD_CONFIG"])
    git_dir = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    assert own == git_dir / "leasehold" / "config.json"
    assert stat.S_IMODE(own.stat().st_mode) == 0o600
    login = json.loads(Path(logged_in["LEASEHOLD_CONFIG"]).read_text())
    assert json.loads(own.read_text())["token"] == login["token"]
    assert own.parent != Path(logged_in["LEASEHOLD_CONFIG"]).parent  # its own attempts, apart from the others
    hooks = json.loads((worktree / ".claude" / "settings.json").read_text())["hooks"]
    assert str(own) in hooks["SessionStart"][0]["hooks"][0]["command"]
    assert not (repo / ".mcp.json").exists()


def test_print_config_has_absolute_paths_and_warns_about_the_login(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LEASEHOLD_CONFIG": "relative/config.json"}
    done = leasehold_in(tmp_path, "mcp", "--print-config", "claude", env=env)
    assert done.returncode == EXIT_OK, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["leasehold"]
    assert entry["env"]["LEASEHOLD_CONFIG"] == str(tmp_path / "relative" / "config.json")
    assert Path(entry["command"]).is_absolute()
    assert "does not exist" in done.stderr

    config = tmp_path / "relative" / "config.json"
    config.parent.mkdir()
    config.write_text("{}")
    env_only = {**env, "LEASEHOLD_URL": "http://127.0.0.1:9", "LEASEHOLD_TOKEN": "lh_x"}
    done = leasehold_in(tmp_path, "mcp", "--print-config", "cursor", env=env_only)
    assert done.returncode == EXIT_OK, done.stderr
    assert "environment only" in done.stderr
    assert "lh_x" not in done.stdout  # a token never goes into a client's configuration
    assert json.loads(done.stdout)["mcpServers"]["leasehold"]["args"] == ["mcp"]


def test_connect_leaves_nothing_for_git_to_commit_in_the_checkout_and_in_a_worktree(logged_in, tmp_path):
    repo = a_repository(tmp_path / "repo")
    for _ in range(2):  # the second time adds no second line
        done = leasehold_in(repo, "connect", "claude", "--write", env=logged_in)
        assert done.returncode == EXIT_OK, done.stderr
    assert (repo / ".mcp.json").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count("/.mcp.json") == 1
    assert exclude.count("/.claude/settings.json") == 1
    assert "info/exclude" in done.stdout

    worktree = tmp_path / "repo.worktrees" / "AGT-2"
    git(repo, "worktree", "add", "-q", "-b", "feature/two", str(worktree))
    done = leasehold_in(tmp_path, "connect", "vscode", "--write", "--worktree", str(worktree), env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    assert (worktree / ".vscode" / "mcp.json").exists()
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""
    # The common git directory's exclude: every worktree of the repository reads it.
    assert "/.vscode/mcp.json" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    git(repo, "worktree", "remove", str(worktree))  # not refused for the files connect wrote
    assert not worktree.exists()


def test_connect_leaves_a_tracked_client_file_out_of_the_exclude(logged_in, tmp_path):
    repo = a_repository(tmp_path / "repo")
    (repo / ".mcp.json").write_text("{}")
    git(repo, "add", ".mcp.json")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "shared mcp")
    done = leasehold_in(repo, "connect", "claude", "--write", env=logged_in)
    assert done.returncode == EXIT_OK, done.stderr
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert "/.mcp.json" not in exclude
    assert "/.claude/settings.json" in exclude


def test_connect_codex_leaves_a_blank_line_before_the_next_table(logged_in, tmp_path):
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text('[mcp_servers.other]\ncommand = "npx"\n\n[profiles.fast]\nmodel = "x"\n')
    env = {**logged_in, "CODEX_HOME": str(home)}
    done = leasehold_in(tmp_path, "connect", "codex", "--write", env=env)
    assert done.returncode == EXIT_OK, done.stderr
    text = (home / "config.toml").read_text()
    assert "}\n\n[profiles.fast]" in text
    assert text.endswith('model = "x"\n')
    assert tomllib.loads(text)["profiles"] == {"fast": {"model": "x"}}
