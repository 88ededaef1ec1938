"""A project's repository and default branch can never reach git as an option (issue 27, H1), from any door."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.errors import ValidationFailed
from ledger.actors import SYSTEM
from ledger.models import Project
from ledger.services import project_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("repository", "kept"),
    [
        ("/srv/git/web", "/srv/git/web"),
        ("/srv/git/web/", "/srv/git/web"),
        ("https://github.com/acme/web.git", "https://github.com/acme/web.git"),
        ("git@github.com:acme/web.git", "git@github.com:acme/web.git"),
        ("file:///srv/git/web.git", "file:///srv/git/web.git"),
        ("", ""),
    ],
)
def test_a_url_or_an_absolute_path_is_a_repository(repository, kept):
    assert project_create(slug="web", name="Web", repository=repository, actor=SYSTEM).repository == kept


@pytest.mark.parametrize(
    "repository",
    ["--upload-pack=touch /tmp/x", "-C/etc", "relative/path", "/srv/../etc", "/srv/a\nb", "https://h/\x01"],
)
def test_anything_else_is_refused_by_the_service_and_the_command(repository):
    with pytest.raises(ValidationFailed) as caught:
        project_create(slug="web", name="Web", repository=repository, actor=SYSTEM)
    assert "repository" in caught.value.details["fields"]
    with pytest.raises(CommandError, match="VALIDATION_ERROR: repository must be"):
        call_command("create_project", "web", "--name", "Web", f"--repository={repository}", stdout=io.StringIO())
    assert not Project.objects.exists()


@pytest.mark.parametrize("branch", ["--output=/tmp/x", "-b", "a..b", "/main", "main/", "ma in", "x.lock", "a~1", ""])
def test_a_default_branch_that_git_would_read_otherwise_is_refused(branch):
    with pytest.raises(ValidationFailed, match="default_branch must be a branch name"):
        project_create(slug="web", name="Web", default_branch=branch, actor=SYSTEM)
    assert (
        project_create(slug="ok", name="Ok", default_branch="release/2.1", actor=SYSTEM).default_branch == "release/2.1"
    )
