from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Agent, Project
from ledger.selectors import agent_for_token

pytestmark = pytest.mark.django_db


def test_create_project_derives_the_key_prefix():
    out = io.StringIO()
    call_command("create_project", "web", "--name", "Web", "--repository", "/srv/web.git", stdout=out)
    project = Project.objects.get(slug="web")
    assert (project.key_prefix, project.repository) == ("WEB", "/srv/web.git")
    assert "WEB-N" in out.getvalue()


def test_create_agent_prints_the_token_alone_on_the_last_line():
    call_command("create_project", "web", "--name", "Web", stdout=io.StringIO())
    out = io.StringIO()
    call_command("create_agent", "agent-07", "--kind", "claude", "--project", "web", stdout=out)
    token = out.getvalue().rstrip("\n").splitlines()[-1]
    agent = agent_for_token(token)
    assert agent is not None
    assert agent.handle == "agent-07"
    assert list(agent.projects.values_list("slug", flat=True)) == ["web"]


def test_create_agent_for_an_unknown_project_fails_cleanly():
    with pytest.raises(CommandError, match="nowhere"):
        call_command("create_agent", "agent-08", "--kind", "codex", "--project", "nowhere", stdout=io.StringIO())
    assert not Agent.objects.exists()


def test_bootstrap_admin_prints_a_password_once():
    first, second = io.StringIO(), io.StringIO()
    call_command("bootstrap_admin", stdout=first)
    call_command("bootstrap_admin", stdout=second)
    password = re.search(r"with password (\S+) ", first.getvalue())
    assert password is not None
    assert password[1] not in second.getvalue()


def test_bootstrap_admin_gives_one_consistent_login_hint_on_each_run():
    """A `scripts/dev` restart printed "An admin user exists; …" and then "log in as the admin above"."""
    url = "http://127.0.0.1:8000/admin/"
    for _run in range(2):
        out = io.StringIO()
        call_command("bootstrap_admin", "--login-url", url, stdout=out)
        lines = out.getvalue().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"Log in at {url} as 'admin' with ")
    assert "shown on the first run" in lines[0]
    assert "manage.py changepassword admin" in lines[0]
