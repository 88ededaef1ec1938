"""The git reader: parsing, refusals, and the guard rails around the real binary."""

from __future__ import annotations

import pytest

from reconciliation.git import (
    GitError,
    LocalRepository,
    is_url,
    parse_worktrees,
    remote_heads,
    run_git,
    worktree_cleanliness,
)
from tests.reconciliation.gitworld import GitWorld

PORCELAIN = """worktree /srv/repo
HEAD 1111111111111111111111111111111111111111
branch refs/heads/main

worktree /srv/wt/feature-a
HEAD 2222222222222222222222222222222222222222
branch refs/heads/feature/a
locked reason: on a removable disk

worktree /srv/wt/detached
HEAD 3333333333333333333333333333333333333333
detached

worktree /srv/wt/gone
HEAD 4444444444444444444444444444444444444444
branch refs/heads/fix/gone
prunable gitdir file points to non-existent location
"""


def test_worktree_porcelain_is_parsed_with_the_first_entry_as_main():
    main, locked, detached, gone = parse_worktrees(PORCELAIN)
    assert (main.path, main.branch, main.is_main) == ("/srv/repo", "main", True)
    assert (locked.branch, locked.locked, locked.is_main) == ("feature/a", True, False)
    assert detached.branch is None
    assert detached.head == "3333333333333333333333333333333333333333"
    assert (gone.branch, gone.prunable) == ("fix/gone", True)


@pytest.mark.parametrize(
    ("repository", "url"),
    [
        ("https://github.com/acme/web.git", True),
        ("file:///srv/git/web.git", True),
        ("git@github.com:acme/web.git", True),
        ("/srv/git/web", False),
        ("relative/path", False),
    ],
)
def test_urls_and_paths_are_told_apart(repository, url):
    assert is_url(repository) is url


def test_local_repository_reads_heads_ancestry_and_distance(tmp_path):
    world = GitWorld(tmp_path)
    world.branch("feature/two-ahead", commits=2)
    repository = LocalRepository(str(world.clone))
    heads = repository.heads()
    assert set(heads) == {"main", "feature/two-ahead"}
    assert all(len(sha) == 40 for sha in heads.values())
    assert repository.is_ancestor("feature/two-ahead", "main") is False
    assert repository.commits_ahead("feature/two-ahead", "main") == 2
    world.merge("feature/two-ahead")
    assert repository.is_ancestor("feature/two-ahead", "main") is True


def test_remote_heads_reads_a_url_and_refuses_an_option_lookalike(tmp_path):
    world = GitWorld(tmp_path)
    assert set(remote_heads(world.url)) == {"main"}
    with pytest.raises(GitError):
        remote_heads("--upload-pack=touch /tmp/pwned")


def test_a_transport_that_runs_commands_is_refused_even_if_git_config_allows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.ext.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    with pytest.raises(GitError, match="not allowed"):
        remote_heads(f"ext::sh -c touch% {tmp_path}/pwned")
    assert not (tmp_path / "pwned").exists()


def test_git_dir_in_the_servers_environment_does_not_redirect_reads(tmp_path, monkeypatch):
    world = GitWorld(tmp_path / "one")
    other = GitWorld(tmp_path / "two")
    other.branch("feature/only-in-two")
    monkeypatch.setenv("GIT_DIR", str(other.clone / ".git"))
    assert "feature/only-in-two" not in LocalRepository(str(world.clone)).heads()


def test_every_call_has_a_timeout(tmp_path):
    world = GitWorld(tmp_path)
    with pytest.raises(GitError, match="timed out"):
        run_git(["for-each-ref"], cwd=world.clone, timeout=0.000001)


def test_cleanliness_counts_changes_and_untracked_files(tmp_path):
    world = GitWorld(tmp_path)
    assert worktree_cleanliness(str(world.clone)).clean
    (world.clone / "README.md").write_text("edited\n")
    (world.clone / "new-1.txt").write_text("x")
    (world.clone / "dir").mkdir()
    (world.clone / "dir" / "new-2.txt").write_text("x")
    cleanliness = worktree_cleanliness(str(world.clone))
    assert (cleanliness.modified, cleanliness.untracked, cleanliness.clean) == (1, 2, False)


def test_missing_and_relative_paths_are_refused_before_git_runs(tmp_path):
    with pytest.raises(GitError, match="does not exist"):
        LocalRepository(str(tmp_path / "missing"))
    with pytest.raises(GitError, match="not absolute"):
        LocalRepository("relative/path")
