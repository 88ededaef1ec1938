"""What the CLI reaches beyond the lease (SPEC §15.4): task show/create, git facts, dependencies; and the small
defects of issue 13 (a closed pipe, STALE_EPOCH's wording, the human context)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from agent.cli.output import EXIT_STDOUT_CLOSED, EXIT_WORKSPACE
from agent.client.errors import StaleEpoch
from agent.client.text import error_text
from tests.agent.live import REPO, leasehold


def claim(env: dict[str, str], key: str) -> dict:
    done = leasehold("--json", "claim", key, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_task_show_prints_the_whole_task_and_reads_its_text_in_ranges(fleet, api, logged_in):
    description = "".join(f"line {number:04d}\n" for number in range(2000))  # 20,000 characters
    key = api.create_task(fleet.project, "Long one", description=description, status="ready")["key"]
    whole = leasehold("task", "show", key, env=logged_in)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.startswith(f"{key}: Long one [ready]")
    assert "line 1999" in whole.stdout

    part = leasehold(
        "--json", "task", "show", key, "--field", "description", "--offset", "100", "--limit", "50", env=logged_in
    )
    assert part.returncode == 0, part.stderr
    answer = json.loads(part.stdout)
    assert answer["text"] == description[100:150]
    assert answer["more"] is True
    human = leasehold("task", "show", key, "--field", "description", "--offset", "19990", env=logged_in)
    assert human.stdout.strip() == description[19990:].strip()
    assert "more follows" not in human.stderr

    claim(logged_in, key)
    current = leasehold("--json", "task", "show", "--field", "description", "--limit", "9", env=logged_in)
    assert json.loads(current.stdout)["text"] == "line 0000"  # default: the current attempt's task


def test_task_create_files_a_follow_up_that_blocks_the_current_task(fleet, api, logged_in):
    key = fleet.ready_task()
    claim(logged_in, key)
    done = leasehold(
        "--json", "task", "create", "Follow-up: flaky fixture", "--description", "found while on it",
        "--status", "ready", "--blocks-current", env=logged_in,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)["task"]
    assert created["title"] == "Follow-up: flaky fixture"
    assert created["status"] == "ready"
    assert [blocker["key"] for blocker in api.task(key)["blocked_by"]] == [created["key"]]

    unblocked = leasehold("unblock", "--by", created["key"], env=logged_in)
    assert unblocked.returncode == 0, unblocked.stderr
    assert api.task(key)["blocked_by"] == []
    blocked = leasehold("block", key, "--by", created["key"], env=logged_in)
    assert blocked.returncode == 0, blocked.stderr
    assert f"{key} is blocked by {created['key']}" in blocked.stdout
    assert [blocker["key"] for blocker in api.task(key)["blocked_by"]] == [created["key"]]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_git_records_the_facts_given_or_detected(fleet, api, logged_in, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "feature/agt-facts")
    identity = ("-c", "user.name=t", "-c", "user.email=t@example.com")
    git(repo, *identity, "commit", "-q", "--allow-empty", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, *identity, "commit", "-q", "--allow-empty", "-m", "work")
    (repo / "scratch.txt").write_text("uncommitted")
    attempt = claim(logged_in, fleet.ready_task())

    given = leasehold("git", "--base-commit", base, "--no-pushed", env=logged_in)
    assert given.returncode == 0, given.stderr
    detected = leasehold("--json", "git", "--detect", "--repo", str(repo), env=logged_in)
    assert detected.returncode == 0, detected.stderr
    recorded = api.attempt(attempt["attempt"])
    assert recorded["base_commit"] == base
    assert recorded["head_commit"] == git(repo, "rev-parse", "HEAD")
    assert recorded["branch"] == "feature/agt-facts"
    assert recorded["commits_ahead"] == 1
    assert recorded["dirty"] is True
    assert recorded["pushed"] is False
    assert recorded["worktree_path"] == str(repo.resolve())

    nothing = leasehold("git", env=logged_in)
    assert nothing.returncode == 2
    not_git = leasehold("git", "--detect", "--repo", str(tmp_path), env=logged_in)
    assert not_git.returncode == EXIT_WORKSPACE
    assert len(not_git.stderr.strip().splitlines()) == 1


def test_the_human_context_shows_the_effective_status_label_and_the_attempt(fleet, logged_in):
    key = fleet.ready_task()
    attempt = claim(logged_in, key)
    shown = leasehold("context", env=logged_in)
    assert shown.returncode == 0, shown.stderr
    first, *rest = shown.stdout.splitlines()
    assert first.endswith("[in_progress]")  # not the stored `ready`
    assert f"Attempt {attempt['attempt']} (epoch {attempt['epoch']})" in rest[0]
    assert f"Label: {attempt['label']}" in rest
    assert not any(line.rstrip().endswith(":") and line.startswith("Previous attempt") for line in rest)


def test_a_closed_stdout_ends_without_a_traceback(fleet, logged_in):
    for _ in range(3):
        fleet.ready_task()  # a few events to print
    done = subprocess.run(
        ["bash", "-c", "python -m agent changes --since 0 | true; echo ${PIPESTATUS[0]} >&2"],
        env={**logged_in, "PATH": f"{Path(__import__('sys').executable).parent}:/usr/bin:/bin"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == str(EXIT_STDOUT_CLOSED)


def test_stale_epoch_never_reads_as_the_same_epoch_twice():
    contradictory = StaleEpoch(
        "AGT-3 is at epoch 2; this write carries epoch 2.",
        details={"attempt": 7, "presented_epoch": 2, "current_epoch": 2},
    )
    text = error_text(contradictory)
    assert "carries epoch 2" not in text
    assert text.startswith("AGT-3 is at epoch 2; attempt 7 belongs to an earlier epoch")
    plain = StaleEpoch(
        "AGT-3 is at epoch 3; this write carries epoch 2.", details={"presented_epoch": 2, "current_epoch": 3}
    )
    assert error_text(plain) == plain.message


def test_task_show_offset_hint_continues_where_the_chunk_ended(fleet, api, logged_in):
    description = "".join(f"row {number:05d}\n" for number in range(3000))  # 30,000 characters: several chunks
    key = api.create_task(fleet.project, "Longer than a chunk", description=description, status="ready")["key"]
    read, offset, hints = "", 0, 0
    while True:
        part = leasehold("task", "show", key, "--field", "description", "--offset", str(offset), env=logged_in)
        assert part.returncode == 0, part.stderr
        read += part.stdout[:-1]  # the text, then print's newline
        hint = re.search(r"more follows: leasehold task show \S+ --field description --offset (\d+)", part.stderr)
        if hint is None:
            break
        hints += 1
        assert int(hint[1]) == len(read)  # where this chunk ended, not offset + the field's length
        offset = int(hint[1])
    assert hints >= 2
    assert read == description  # following the hints reads the whole text, nothing skipped


def test_task_create_and_update_carry_required_labels(fleet, api, logged_in):
    done = leasehold("--json", "task", "create", "Train the ranker", "--status", "ready", "--requires", "gpu, cuda",
                     env=logged_in)  # fmt: skip
    assert done.returncode == 0, done.stderr
    key = json.loads(done.stdout)["task"]["key"]
    assert api.task(key)["requires"] == ["gpu", "cuda"]
    shown = leasehold("task", "show", key, env=logged_in)
    assert "requires: gpu, cuda" in shown.stdout

    cleared = leasehold("--json", "task", "update", key, "--requires", "", env=logged_in)
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["changed"] == ["requires"]
    assert api.task(key)["requires"] == []
    refused = leasehold("task", "update", key, "--requires", "GPU", env=logged_in)
    assert refused.returncode != 0
    assert "requires" in refused.stderr
    assert api.task(key)["requires"] == []
    nothing = leasehold("task", "update", key, env=logged_in)
    assert nothing.returncode != 0
    assert "--requires" in nothing.stderr
