"""A project's `remote` (SPEC §15.4): the git URL agents push to, named besides its repository."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from core.errors import ValidationFailed
from ledger.actors import SYSTEM
from ledger.models import Project
from ledger.services import project_create

pytestmark = pytest.mark.django_db


def test_create_project_takes_a_remote():
    call_command(
        "create_project",
        "web",
        "--name",
        "Web",
        "--repository",
        "/srv/agents/web",
        "--remote",
        "git@github.com:acme/web.git",
        stdout=io.StringIO(),
    )
    project = Project.objects.get(slug="web")
    assert (project.repository, project.remote) == ("/srv/agents/web", "git@github.com:acme/web.git")


@pytest.mark.parametrize(
    "remote",
    ["https://github.com/acme/web.git", "ssh://git@example.com/web.git", "file:///srv/git/web.git", "git@host:web"],
)
def test_a_remote_is_a_git_url(remote):
    assert project_create(slug="web", name="Web", remote=f"  {remote} ", actor=SYSTEM).remote == remote


@pytest.mark.parametrize(
    "remote", ["relative/path", "--upload-pack=touch", "https://", "/srv/../etc/web.git", "/srv/git/we\x01b"]
)
def test_anything_else_is_refused_naming_the_field(remote):
    with pytest.raises(ValidationFailed) as caught:
        project_create(slug="web", name="Web", remote=remote, actor=SYSTEM)
    assert set(caught.value.details["fields"]) == {"remote"}
    assert not Project.objects.exists()


def test_a_remote_may_be_an_absolute_path_as_git_accepts_it():
    # `git clone /srv/git/web.git` works: so does the remote (issue 29), normalised.
    project = project_create(slug="web", name="Web", remote="/srv/git//web.git/", actor=SYSTEM)
    assert project.remote == "/srv/git/web.git"


def test_a_remote_with_a_password_is_refused():
    with pytest.raises(ValidationFailed) as caught:
        project_create(slug="web", name="Web", remote="https://bot:s3cret@github.com/acme/web.git", actor=SYSTEM)
    assert "password" in caught.value.message
    with pytest.raises(CommandError):
        call_command("create_project", "web", "--name", "Web", "--remote", "https://u:p@h/x.git", stdout=io.StringIO())


def test_no_remote_is_the_default():
    assert project_create(slug="web", name="Web", actor=SYSTEM).remote == ""
