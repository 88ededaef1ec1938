"""The admin adds a project with its remote through `project_create`, which refuses a bad remote on the form."""

from __future__ import annotations

import pytest

from ledger.models import Project

pytestmark = pytest.mark.django_db

FORM = {
    "slug": "web",
    "name": "Web",
    "key_prefix": "",
    "repository": "/srv/agents/web",
    "default_branch": "main",
    "default_lease_seconds": 900,
    "queue_wait_max_seconds": 3600,
    "required_isolation": "none",
}


def test_a_project_is_added_with_its_remote(ops_client):
    response = ops_client.post("/admin/ledger/project/add/", {**FORM, "remote": "https://git.example.com/web.git"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Project.objects.get(slug="web").remote == "https://git.example.com/web.git"
    page = ops_client.get(f"/admin/ledger/project/{Project.objects.get().pk}/change/").content.decode()
    assert "https://git.example.com/web.git" in page


def test_a_remote_with_a_password_is_refused_on_the_form(ops_client):
    response = ops_client.post("/admin/ledger/project/add/", {**FORM, "remote": "https://u:secret@git.example.com/w"})
    assert response.status_code == 200
    assert "must not contain a password" in response.content.decode()
    assert not Project.objects.exists()
