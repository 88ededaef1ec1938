"""The admin's attempt page shows the holder's git facts and what reconciliation saw (SPEC §15.4)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from leases.models import Attempt
from leases.services import attempt_set_git
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def test_the_attempt_page_shows_every_git_fact(manager_client, fleet):
    attempt_set_git(
        proof=proof_of(fleet.grant),
        head_commit="c" * 40,
        commits_ahead=7,
        dirty=True,
        pushed=False,
        worktree_path="/srv/agents/web.worktrees/WEB-1",
        host="build-box-3",
    )
    Attempt.objects.filter(pk=fleet.grant.attempt.pk).update(seen_commits_ahead=9)
    page = manager_client.get(reverse("admin:leases_attempt_change", args=[fleet.grant.attempt.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    for shown in ("c" * 40, "/srv/agents/web.worktrees/WEB-1", "build-box-3", "Commits ahead", "Seen commits ahead"):
        assert shown in text
    assert '<div class="readonly">7</div>' in text
    assert '<div class="readonly">9</div>' in text
    assert "Last worked at" in text
