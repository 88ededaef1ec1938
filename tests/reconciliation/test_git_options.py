"""No value from the ledger reaches git as an option (issue 27, H1), against a real repository and the real binary.

The attack: an attempt carried `base_commit "--output=/"` and `head_commit
"/path/to/victim"`; `git diff --name-only "--output=/../path/to/victim"`
truncated the victim. Every helper is run here with `-`-leading values and
must leave every file as it was, answering None or a GitError.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leases.models import Attempt
from leases.services import attempt_finish, lease_claim
from reconciliation.git import GitError, LocalRepository, remote_heads, worktree_cleanliness
from reconciliation.services import reconcile
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git
from tests.reconciliation.scenarios import agent_in

VICTIM_TEXT = "precious\n"


@pytest.fixture
def target() -> Iterator[Path]:
    """A directory whose files must stay exactly as they are; `victim` is the file an attack would truncate.

    Short (`/tmp/h1…/victim`): on PostgreSQL `head_commit` holds at most 40 characters.
    """
    directory = Path(tempfile.mkdtemp(prefix="h1", dir="/tmp"))
    (directory / "victim").write_text(VICTIM_TEXT)
    yield directory
    shutil.rmtree(directory)


def _untouched(target: Path) -> None:
    assert sorted(os.listdir(target)) == ["victim"]
    assert (target / "victim").read_text() == VICTIM_TEXT


def _attacks(target: Path) -> list[str]:
    victim = str(target / "victim")
    return [
        "--output=/",
        f"--output={target}/pwned",
        "-o/tmp",
        f"--output={victim}",
        "--all",
        f"-C{target}",
        victim,
    ]


def _calls(repository: LocalRepository, value: str, victim: str) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("changed_files(base)", lambda: repository.changed_files(value, victim)),
        ("changed_files(head)", lambda: repository.changed_files("0" * 40, value)),
        ("merge_base(commit)", lambda: repository.merge_base(value, "main")),
        ("merge_base(branch)", lambda: repository.merge_base("0" * 40, value)),
        ("commits_since(base)", lambda: repository.commits_since("main", base_commit=value)),
        ("commits_since(branch)", lambda: repository.commits_since(value, base_commit="0" * 40)),
        ("history_of", lambda: repository.history_of(value)),
        ("is_ancestor(branch)", lambda: repository.is_ancestor(value, "main")),
        ("is_ancestor(of)", lambda: repository.is_ancestor("main", value)),
        ("commits_ahead(branch)", lambda: repository.commits_ahead(value, "main")),
        ("commits_ahead(of)", lambda: repository.commits_ahead("main", value)),
        ("remove_worktree", lambda: repository.remove_worktree(value)),
        ("worktree_cleanliness", lambda: worktree_cleanliness(value)),
        ("remote_heads", lambda: remote_heads(value)),
    ]


def test_every_git_helper_refuses_option_like_values_and_touches_no_file(world: GitWorld, target: Path):
    repository = LocalRepository(str(world.clone))
    victim = str(target / "victim")
    for value in _attacks(target):
        for name, call in _calls(repository, value, victim):
            try:
                answer = call()
            except GitError as exc:
                answer = str(exc)
                assert answer, name  # a clear message, never a silent failure
            else:
                assert answer in (None, False), f"{name}({value!r}) answered {answer!r}"
            _untouched(target)
    # The well-formed values still work.
    main = git("rev-parse", "main", cwd=world.clone)
    assert repository.changed_files(main, main) == []
    assert repository.merge_base(main, "main") == main
    assert repository.commits_since("main", base_commit=main) == 0


@pytest.mark.django_db
def test_an_attempt_carrying_an_option_for_a_commit_truncates_nothing(world: GitWorld, target: Path, clock):
    """The reproduction: `unreserved_change` diffs a finished attempt's base and head (a row written around the API)."""
    project = ProjectFactory(repository=str(world.clone))
    lease_claim(task=TaskFactory(project=project, paths=["src"]), agent=agent_in(project))
    finished = lease_claim(task=TaskFactory(project=project), agent=agent_in(project))
    attempt_finish(proof=proof_of(finished), outcome="review")
    Attempt.objects.filter(pk=finished.attempt.pk).update(
        branch="feature/crafted", base_commit="--output=/", head_commit=str(target / "victim")
    )
    reconcile()
    _untouched(target)
