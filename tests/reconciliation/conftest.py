from __future__ import annotations

import pytest

from tests.reconciliation.gitworld import GIT_TEST_ENV, GitWorld


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch, tmp_path):
    """The code under test runs git too: no user or system configuration may leak into it."""
    for name, value in GIT_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def world(tmp_path) -> GitWorld:
    return GitWorld(tmp_path / "git")
