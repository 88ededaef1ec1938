"""`import_project` is a trust boundary (issue 27, H1, L3, L4): it refuses what the API refuses, and stays bounded.

Every refusal names the line, and a refused file writes nothing (the whole
import is one transaction).
"""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from leases.models import Attempt
from ledger.models import Event, Project, Task
from operations.transfer.export import project_export
from tests.operations.test_backup import ROOT, _base_env
from tests.operations.transfer.scenario import build_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def exported(admin_user) -> list[str]:
    build_project(admin_user)
    out = io.StringIO()
    project_export(project=Project.objects.get(slug="src"), out=out)
    return out.getvalue().splitlines(keepends=True)


def _import(tmp_path: Path, lines: list[str], *extra: str) -> str:
    path = tmp_path / "crafted.jsonl"
    path.write_text("".join(lines))
    out = io.StringIO()
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", *extra, stdout=out)
    return out.getvalue()


def _refused(tmp_path: Path, lines: list[str], match: str, *extra: str) -> None:
    before = (Project.objects.count(), Task.objects.count(), Attempt.objects.count(), Event.objects.count())
    with pytest.raises(CommandError, match=match):
        _import(tmp_path, lines, *extra)
    assert (Project.objects.count(), Task.objects.count(), Attempt.objects.count(), Event.objects.count()) == before


def _edited(lines: list[str], row_type: str, **changes: Any) -> tuple[list[str], int]:
    """The file with the first row of `row_type` changed; and that row's line number."""
    kind = row_type
    index = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == kind)
    row = json.loads(lines[index])
    assert set(changes) <= set(row), f"a {kind} row has no {set(changes) - set(row)}"
    row.update(changes)
    return [*lines[:index], json.dumps(row) + "\n", *lines[index + 1 :]], index + 1


# --- H1: the crafted attempt never reaches the database, so never reaches git -------------------


def test_an_attempt_whose_commits_are_options_is_refused(tmp_path, exported):
    lines, number = _edited(exported, "attempt", base_commit="--output=/", head_commit="/etc/victim")
    _refused(tmp_path, lines, rf"line {number}: base_commit must be 40 lowercase hex characters")
    lines, number = _edited(exported, "attempt", head_commit="--output=/tmp/pwned")
    _refused(tmp_path, lines, rf"line {number}: head_commit must be 40 lowercase hex")
    lines, number = _edited(exported, "review", head_commit="-o/tmp/x")
    _refused(tmp_path, lines, rf"line {number}: head_commit must be 40 lowercase hex")


# --- L4: what the API refuses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "changes", "says"),
    [
        ("event", {"event_type": "forged.anything"}, "event type 'forged.anything' is not one the ledger writes"),
        ("event", {"severity": "apocalyptic"}, "not a valid event row: .*apocalyptic"),
        ("task", {"title": "t" * 100_000}, "not a valid task row: .*at most"),
        ("task", {"epoch": 2**63 - 1}, "epoch: expected an integer its column holds on every database"),
        ("attempt", {"epoch": 2**31}, "epoch: expected an integer its column holds"),
        ("attempt", {"lease_expires_at": "9999-12-31T00:00:00+00:00"}, "lease_expires_at is beyond the longest lease"),
        ("attempt", {"branch": "../../etc"}, "INVALID_BRANCH_NAME"),
        ("attempt", {"branch": "--output=x"}, "INVALID_BRANCH_NAME"),
        ("attempt", {"worktree_path": "relative/worktree"}, "worktree_path must be an absolute path"),
        ("attempt", {"worktree_path": "/w/a\nb"}, "worktree_path must be a non-empty string without control"),
        ("project", {"default_branch": "--output=/tmp/x"}, "default_branch must be a branch name"),
    ],
)
def test_a_row_the_api_would_refuse_is_refused(tmp_path, exported, kind, changes, says):
    lines, number = _edited(exported, kind, **changes)
    _refused(tmp_path, lines, rf"line {number}: .*{says}")


def test_an_unknown_agent_handle_is_refused(tmp_path, exported):
    lines, number = _edited(exported, "attempt", agent="nobody-defined-this")
    _refused(tmp_path, lines, rf"line {number}: agent names agent 'nobody-defined-this', which no earlier row defines")


@pytest.mark.parametrize(
    ("kind", "changes", "says"),
    [
        ("user", {"username": "x" * 1000}, "not a valid username"),
        ("user", {"username": "bad name\u0007"}, "not a valid username"),
        ("agent", {"handle": 42}, "handle must be a string"),
        ("agent", {"handle": "fresh-agent", "kind": "overlord"}, "not a valid agent"),
    ],
)
def test_users_and_agents_are_checked(tmp_path, exported, kind, changes, says):
    lines, number = _edited(exported, kind, **changes)
    _refused(tmp_path, lines, rf"line {number}: {says}")


def test_a_line_over_one_megabyte_is_refused(tmp_path, exported):
    lines, number = _edited(exported, "event", payload={"blob": "x" * 5_000_000})
    _refused(tmp_path, lines, rf"line {number}: the line is longer than 1048576 bytes")


def test_json_nested_past_the_bound_is_refused_without_a_recursion_error(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if json.loads(line)["type"] == "event")
    deep = exported[index].replace('"payload":', '"payload":' + "[" * 200_000 + "]" * 200_000 + ',"was":', 1)
    _refused(tmp_path, [*exported[:index], deep, *exported[index + 1 :]], rf"line {index + 1}: JSON nested deeper")


def test_an_endless_line_fails_at_once_with_bounded_memory(tmp_path):
    """`import_project /dev/zero` in a process of its own, held to 1 GiB of address space and 60 s."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", "import_project", "/dev/zero"],
        cwd=ROOT,
        env=_base_env(LEASEHOLD_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limited,  # a resource limit, set before exec
        check=False,
    )
    assert done.returncode != 0
    assert "line 1: the line is longer than 1048576 bytes" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 30


# --- L3: the project's repository and remote --------------------------------------------------------


def test_a_local_repository_needs_the_explicit_flag(tmp_path, exported):
    for location in ("/srv/git/other-teams-repo", "file:///srv/git/other.git"):
        lines, number = _edited(exported, "project", repository=location)
        _refused(tmp_path, lines, rf"line {number}: repository '{location}' is on this machine.*--allow-repository")
    lines, _ = _edited(exported, "project", repository="/srv/git/web")
    assert "Imported" in _import(tmp_path, lines, "--allow-repository")
    assert Project.objects.get(slug="copy").repository == "/srv/git/web"


@pytest.mark.parametrize(
    ("field", "location", "says"),
    [
        ("repository", "/srv/../etc/repo", "absolute path without '..'"),
        ("repository", "relative/repo", "a git URL or an absolute path"),
        ("remote", "-uhttps://x", "must be a git URL"),
        ("remote", "https://bot:s3cret@github.com/a/b.git", "must not contain a password"),
    ],
)
def test_a_repository_or_remote_the_admin_refuses_is_refused(tmp_path, exported, field, location, says):
    lines, number = _edited(exported, "project", **{field: location})
    _refused(tmp_path, lines, rf"line {number}: .*{says}", "--allow-repository")


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
@pytest.mark.parametrize(
    "remote",
    [
        "http://169.254.169.254/latest/meta-data.git",
        "https://127.0.0.1:8443/x.git",
        "ssh://git@10.0.0.7/srv/x.git",
        "git@192.168.1.2:acme/web.git",
        "git://[::1]/x.git",
    ],
)
def test_a_remote_on_a_private_address_is_refused_like_a_webhook(tmp_path, exported, remote):
    lines, number = _edited(exported, "project", remote=remote)
    _refused(tmp_path, lines, rf"line {number}: remote .*loopback, private or link-local")
