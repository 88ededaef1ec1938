"""The git side of workspaces (SPEC §15.1) with real git: branches, worktrees, takeovers, the trailer hook, facts."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from agent.workspace import state
from agent.workspace.git import WorkspaceError, find_repository, head_facts, open_workspace, worktrees
from agent.workspace.githooks import install_label_hook
from tests.agent.gitrepos import git, git_env, make_repos, trailers

LABEL = "owner=agent-a;branch=feature/agt-1-demo;env=-;task=AGT-1;epoch=1"
BRANCH = "feature/agt-1-demo"


def never(attempt: int) -> bool | None:
    raise AssertionError(f"the ledger was asked about attempt {attempt}")


def opened(repos, **options):
    arguments = {
        "task": "AGT-1",
        "branch": BRANCH,
        "base_commit": None,
        "default_branch": "main",
        "directory": None,
        "own_attempt": 1,
        "is_terminal": never,
    }
    return open_workspace(find_repository(repos.clone), **{**arguments, **options})


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


def test_not_a_git_repository_is_one_line(tmp_path):
    with pytest.raises(WorkspaceError) as refused:
        find_repository(tmp_path)
    assert str(refused.value) == f"{tmp_path.resolve()} is not in a git repository (give one with --repo PATH)."


def test_a_new_branch_starts_at_origin_default_in_the_default_worktree(tmp_path):
    repos = make_repos(tmp_path)
    main_head = git(repos.clone, "rev-parse", "HEAD")
    result = opened(repos)
    assert result.path == tmp_path / "project.worktrees" / "AGT-1"
    assert result.branch_source == "created"
    assert result.base_commit == main_head
    assert git(result.path, "symbolic-ref", "--short", "HEAD") == BRANCH
    # The main checkout is where it was.
    assert git(repos.clone, "symbolic-ref", "--short", "HEAD") == "main"
    # From inside the new worktree the repository is still the main checkout.
    assert find_repository(result.path).root == repos.clone


def test_the_branch_comes_from_origin_when_it_is_there(tmp_path):
    repos = make_repos(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(repos.remote), str(elsewhere))
    git(elsewhere, "checkout", "-q", "-b", BRANCH)
    pushed_head = repos.commit(elsewhere, "work.txt")
    git(elsewhere, "push", "-q", "origin", BRANCH)
    result = opened(repos, base_commit=git(repos.clone, "rev-parse", "HEAD"))
    assert result.branch_source == "origin"
    assert git(result.path, "rev-parse", "HEAD") == pushed_head
    assert git(result.path, "rev-parse", "--abbrev-ref", "@{upstream}") == f"origin/{BRANCH}"


def test_without_a_remote_the_local_default_branch_is_the_start_and_a_local_branch_is_kept(tmp_path):
    repos = make_repos(tmp_path, with_remote=False)
    git(repos.clone, "branch", "feature/other")
    result = opened(repos, branch="feature/other", directory=tmp_path / "mine")
    assert result.branch_source == "local"
    assert result.path == tmp_path / "mine"
    fresh = opened(repos, task="AGT-2", branch="feature/agt-2")
    assert fresh.branch_source == "created"
    assert fresh.base_commit == git(repos.clone, "rev-parse", "main")


def test_an_inherited_base_commit_is_where_a_new_branch_starts(tmp_path):
    repos = make_repos(tmp_path)
    base = git(repos.clone, "rev-parse", "HEAD")
    repos.commit(repos.clone, "later.txt")
    git(repos.clone, "push", "-q", "origin", "main")
    result = opened(repos, base_commit=base)
    assert git(result.path, "rev-parse", "HEAD") == base
    assert result.base_commit == base


def predecessor_worktree(repos, tmp_path, *, attempt: int | None = 5) -> Path:
    first = opened(repos, own_attempt=attempt or 99)
    if attempt is not None:
        state.write_worktree_pointer(first.path, agent="agent-a", task="AGT-1", attempt_id=attempt)
    repos.commit(first.path, "committed.txt")
    (first.path / "uncommitted.txt").write_text("the predecessor's unsaved work\n")
    return first.path


def test_a_terminal_predecessors_worktree_is_taken_over_as_it_is(tmp_path):
    repos = make_repos(tmp_path)
    path = predecessor_worktree(repos, tmp_path)
    asked: list[int] = []
    result = opened(repos, own_attempt=6, is_terminal=lambda attempt: asked.append(attempt) or True)
    assert asked == [5]
    assert result.path == path
    assert result.taken_over_from == 5
    assert (path / "uncommitted.txt").read_text() == "the predecessor's unsaved work\n"


def test_a_branch_checked_out_by_a_live_attempt_is_refused(tmp_path):
    repos = make_repos(tmp_path)
    path = predecessor_worktree(repos, tmp_path)
    with pytest.raises(WorkspaceError, match="by attempt 5, which is still live"):
        opened(repos, own_attempt=6, is_terminal=lambda attempt: False)
    assert (path / "uncommitted.txt").exists()


def test_a_worktree_no_attempt_is_known_for_is_refused_unless_the_context_names_it(tmp_path):
    repos = make_repos(tmp_path)
    path = predecessor_worktree(repos, tmp_path, attempt=None)
    with pytest.raises(WorkspaceError, match="no ended attempt is known"):
        opened(repos, own_attempt=6)
    predecessor = {"attempt": 5, "status": "expired", "worktree_path": str(path), "host": None}
    result = opened(repos, own_attempt=6, predecessor=predecessor)
    assert (result.path, result.taken_over_from) == (path, 5)


def test_the_branch_checked_out_in_the_main_checkout_is_refused_and_left_alone(tmp_path):
    repos = make_repos(tmp_path)
    git(repos.clone, "checkout", "-q", "-b", BRANCH)
    (repos.clone / "README.md").write_text("edited, not committed\n")
    with pytest.raises(WorkspaceError, match=r"main checkout .* \(with uncommitted changes\): switch it"):
        opened(repos)
    assert (repos.clone / "README.md").read_text() == "edited, not committed\n"


def test_a_dirty_main_checkout_is_a_warning_and_stays_dirty(tmp_path):
    repos = make_repos(tmp_path)
    (repos.clone / "README.md").write_text("edited, not committed\n")
    result = opened(repos)
    assert any("uncommitted changes" in warning for warning in result.warnings)
    assert (repos.clone / "README.md").read_text() == "edited, not committed\n"
    assert (result.path / "README.md").read_text() == "# project\n"


def test_a_directory_with_files_is_never_used(tmp_path):
    repos = make_repos(tmp_path)
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "keep.txt").write_text("mine\n")
    with pytest.raises(WorkspaceError, match="is not an empty directory"):
        opened(repos, directory=target)
    assert (target / "keep.txt").read_text() == "mine\n"
    assert len(worktrees(find_repository(repos.clone))) == 1


def test_the_hook_adds_the_trailer_once_never_on_merges_nor_to_an_empty_message(tmp_path):
    repos = make_repos(tmp_path)
    pre_commit_ran = tmp_path / "pre-commit-ran"
    hook = repos.clone / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {pre_commit_ran}\n")
    hook.chmod(0o755)
    path = opened(repos).path
    install_label_hook(path, LABEL)

    repos.commit(path, "one.txt")
    assert trailers(path, "-1") == [LABEL]
    assert pre_commit_ran.exists()  # the repository's own hooks still run
    git(path, "commit", "-q", "--amend", "-m", f"one, amended\n\nLeasehold-Label: {LABEL}")
    assert trailers(path, "-1") == [LABEL]
    assert git(path, "log", "-1", "--format=%B").count("Leasehold-Label") == 1

    # A message written in the editor gets it too (commit-msg, after the editor).
    (path / "two.txt").write_text("2\n")
    git(path, "add", "two.txt")
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "written in the editor\\n" > "$1"\n')
    editor.chmod(0o755)
    subprocess.run(["git", "commit", "-q"], cwd=path, env={**git_env(), "GIT_EDITOR": str(editor)}, check=True)
    assert trailers(path, "-1") == [LABEL]

    # An empty message still aborts the commit.
    (path / "three.txt").write_text("3\n")
    git(path, "add", "three.txt")
    empty = subprocess.run(["git", "commit", "-q", "-m", ""], cwd=path, env=git_env(), capture_output=True)
    assert empty.returncode != 0

    git(path, "commit", "-q", "-m", "three")
    git(repos.clone, "commit", "-q", "--allow-empty", "-m", "on main")
    git(path, "merge", "-q", "--no-ff", "-m", "merge main", "main")
    assert trailers(path, "-1") == [""]  # the merge commit has none
    assert git(path, "log", "-1", "--format=%P").count(" ") == 1

    # Only this worktree has the hook: the main checkout commits without a trailer.
    repos.commit(repos.clone, "plain.txt")
    assert trailers(repos.clone, "-1") == [""]


def test_facts_say_head_commits_ahead_dirty_and_pushed(tmp_path):
    repos = make_repos(tmp_path)
    result = opened(repos)
    base = result.base_commit
    assert head_facts(result.path, branch=BRANCH, base_commit=base) == {
        "dirty": False,
        "head_commit": base,
        "commits_ahead": 0,
        "pushed": False,
    }
    repos.commit(result.path, "a.txt")
    head = repos.commit(result.path, "b.txt")
    (result.path / "scratch.txt").write_text("untracked\n")
    facts = head_facts(result.path, branch=BRANCH, base_commit=base)
    assert facts == {"dirty": True, "head_commit": head, "commits_ahead": 2, "pushed": False}
    git(result.path, "push", "-q", "origin", BRANCH)
    assert head_facts(result.path, branch=BRANCH, base_commit=base)["pushed"] is True


def test_a_worktree_half_written_by_another_process_is_listed_once_it_is_complete(tmp_path):
    # `git worktree add` elsewhere writes .git/worktrees/NAME/ file by file; meanwhile `git worktree list` fails.
    repos = make_repos(tmp_path, with_remote=False)
    half = repos.clone / ".git" / "worktrees" / "half"
    half.mkdir(parents=True)
    (half / "gitdir").write_text(f"{tmp_path / 'half'}/.git\n")
    (half / "commondir").write_text("")
    repository = find_repository(repos.clone)
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run(["git", "worktree", "list"], cwd=repos.clone, check=True, capture_output=True)
    finished = threading.Timer(0.3, lambda: (half / "commondir").write_text("../..\n"))
    finished.start()
    try:
        listed = worktrees(repository)
    finally:
        finished.join()

    assert [worktree.main for worktree in listed] == [True, False]


def test_a_listing_that_keeps_failing_is_still_an_error(tmp_path):
    repos = make_repos(tmp_path, with_remote=False)
    half = repos.clone / ".git" / "worktrees" / "half"
    half.mkdir(parents=True)
    (half / "gitdir").write_text(f"{tmp_path / 'half'}/.git\n")
    (half / "commondir").write_text("")

    with pytest.raises(WorkspaceError, match="commondir"):
        worktrees(find_repository(repos.clone))
