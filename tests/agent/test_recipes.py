"""The recipes of docs/agents.md, run exactly as written (by bash), with stand-ins for `claude`, `codex` and `make`.

Each recipe runs in its own project, so `--next` finds the one task the test made.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from agent.client import LeaseholdClient
from tests.agent import standins
from tests.agent.gitrepos import git, make_repos, trailers
from tests.agent.live import REPO, agent_env

DOCS = REPO / "docs" / "agents.md"
RECIPE = re.compile(r"<!-- recipe: (?P<name>[a-z-]+) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.DOTALL)


def recipes() -> dict[str, str]:
    return {match["name"]: match["body"] for match in RECIPE.finditer(DOCS.read_text())}


def test_the_docs_have_the_recipes_and_the_readme_the_one_line_loop():
    assert set(recipes()) == {"claude", "codex", "shell-script", "shell", "fleet"}
    readme = (REPO / "README.md").read_text()
    first_section = readme.split("\n## ", 1)[0]
    assert 'leasehold run --next --worktree -- claude -p "Work on {task}; read {context_file}"' in first_section


@pytest.fixture
def project(fleet, tmp_path):
    """A project of its own, an agent in it, a repository, stand-ins; (env, repos, log, api client, slug)."""
    slug = "r" + tmp_path.name[-8:].replace("_", "").lower()
    fleet.server.manage("create_project", slug, "--name", f"Recipes {slug}")
    token = fleet.server.create_agent(f"cook-{slug}", project=slug)
    env = agent_env(tmp_path / "home")
    env.update(LEASEHOLD_URL=fleet.server.url, LEASEHOLD_TOKEN=token, LEASEHOLD_PROJECT=slug)
    env.pop("LEASEHOLD_TRACE")
    log = tmp_path / "calls.jsonl"
    bin_dir = standins.install(tmp_path / "bin", "claude", "codex", "make")
    repos = make_repos(tmp_path / "git")
    client = LeaseholdClient(fleet.server.url, token)
    key = client.create_task(slug, "Add multiply()", status="ready", description="Add multiply() to calc.py.")["key"]
    yield standins.run_env(env, bin_dir, log), repos, log, client, key
    client.close()


def bash(line: str, *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


AGENT_WORK = (
    "echo 'def multiply(a, b): return a * b' > calc.py && git add calc.py && git commit -qm 'multiply()' && "
    "leasehold checkpoint 'multiply() written' && "
    """printf '{"outcome": "review", "result_summary": "multiply() added"}' > "$LEASEHOLD_OUTCOME_FILE" """
)


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_the_coding_agent_recipes_run_as_written(project, name):
    env, repos, log, client, key = project
    env["STANDIN_THEN"] = AGENT_WORK
    done = bash(recipes()[name], env=env, cwd=repos.clone)
    assert done.returncode == 0, done.stderr
    [call] = standins.calls(log)
    assert call["name"] == name
    worktree = repos.clone.parent / "project.worktrees" / key
    assert call["cwd"] == str(worktree)
    context_file = call["env"]["LEASEHOLD_CONTEXT_FILE"]
    prompt = call["argv"][1] if name == "claude" else call["argv"][-1]
    if name == "claude":
        assert call["argv"][0] == "-p"
        assert call["argv"][2:] == ["--permission-mode", "acceptEdits"]
    else:
        assert call["argv"][:2] == ["exec", "--full-auto"]
        assert f"on branch {call['env']['LEASEHOLD_BRANCH']}." in prompt
    # The placeholders are filled in; the outcome file's variable reaches the prompt as a name to use.
    assert prompt.startswith(f"Work on {key}")
    assert f"Read {context_file} first" in prompt
    assert "$LEASEHOLD_OUTCOME_FILE" in prompt
    assert "Add multiply() to calc.py." in call["context"]
    assert trailers(worktree, "-1") == [call["env"]["LEASEHOLD_LABEL"]]
    attempt = client.attempt(int(call["env"]["LEASEHOLD_ATTEMPT_ID"]))
    assert (attempt["status"], attempt["result_summary"]) == ("completed", "multiply() added")
    assert client.task(key)["status"] == "review"


def test_the_shell_script_recipe_runs_as_written(project):
    env, repos, log, client, key = project
    script = repos.clone / "scripts" / "agent-step.sh"
    script.parent.mkdir()
    script.write_text(recipes()["shell-script"] + "\n")
    script.chmod(0o755)
    git(repos.clone, "add", "scripts/agent-step.sh")
    git(repos.clone, "commit", "-qm", "the agent step")
    git(repos.clone, "push", "-q", "origin", "main")
    env["STANDIN_THEN"] = "echo generated >> generated.txt"  # `make generate` and `make test` stand in for the work
    done = bash(recipes()["shell"], env=env, cwd=repos.clone)
    assert done.returncode == 0, done.stderr
    worktree = repos.clone.parent / "project.worktrees" / key
    assert [(call["name"], call["argv"], call["cwd"]) for call in standins.calls(log)] == [
        ("make", ["generate"], str(worktree)),
        ("make", ["test"], str(worktree)),
    ]
    assert f"Working on {key}" in done.stdout
    assert "# " + key in done.stdout  # the script showed the context file
    label = standins.calls(log)[0]["env"]["LEASEHOLD_LABEL"]
    assert trailers(worktree, "-1") == [label]
    context = client.context(key)
    assert context["latest_checkpoint"]["content"] == "Regenerated; running the tests"
    assert client.task(key)["status"] == "review"
    outcome_summary = client.attempt(int(standins.calls(log)[0]["env"]["LEASEHOLD_ATTEMPT_ID"]))["result_summary"]
    assert outcome_summary == "Regenerated; tests pass."
