"""`unreserved_change` (SPEC §19) against a real repository: a finished branch touched another attempt's live paths."""

from __future__ import annotations

import pytest

from leases.services import attempt_finish, lease_claim
from reconciliation.models import Condition, Finding, FindingStatus
from reconciliation.services import reconcile
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db


def _open(condition: str) -> list[Finding]:
    return list(Finding.objects.filter(condition=condition).exclude(status=FindingStatus.RESOLVED))


def _finished_branch_touching(world: GitWorld, project, files: dict[str, str]):
    base = git("rev-parse", "main", cwd=world.clone)
    git("checkout", "-q", "-b", "feature/wide-change", cwd=world.clone)
    for name, content in files.items():
        (world.clone / name).parent.mkdir(parents=True, exist_ok=True)
        world.commit_file(name, content, f"change {name}")
    git("checkout", "-q", "main", cwd=world.clone)
    grant = lease_claim(
        task=TaskFactory(project=project), agent=agent_in(project), branch="feature/wide-change", base_commit=base
    )
    attempt_finish(proof=proof_of(grant), outcome="review")
    return grant


def test_a_finished_branch_that_changed_files_inside_a_live_exclusive_reservation_is_found(world, clock):
    project = ProjectFactory(repository=str(world.clone))
    holder = lease_claim(task=TaskFactory(project=project, paths=["src/api"]), agent=agent_in(project))
    finished = _finished_branch_touching(world, project, {"src/api.py": "x", "notes.txt": "y"})
    # `src/api.py` is not inside `src/api`: nothing yet.
    reconcile()
    assert _open(Condition.UNRESERVED_CHANGE) == []

    git("checkout", "-q", "feature/wide-change", cwd=world.clone)
    (world.clone / "src" / "api").mkdir(exist_ok=True)
    world.commit_file("src/api/views.py", "z", "touch the reserved directory")
    git("checkout", "-q", "main", cwd=world.clone)
    reconcile()
    [finding] = _open(Condition.UNRESERVED_CHANGE)
    assert finding.attempt_id == finished.attempt.pk
    assert finding.detail["files"] == ["src/api/views.py"]
    assert finding.detail["reserved_by_task"] == holder.task.key
    assert finding.detail["reserved_paths"] == ["src/api"]


def test_shared_or_ended_reservations_are_not_a_conflict(world, clock):
    project = ProjectFactory(repository=str(world.clone))
    shared = lease_claim(task=TaskFactory(project=project, paths=["src"], paths_mode="shared"), agent=agent_in(project))
    exclusive = lease_claim(task=TaskFactory(project=project, paths=["docs"]), agent=agent_in(project))
    _finished_branch_touching(world, project, {"src/a.py": "x", "docs/guide.md": "y"})
    attempt_finish(proof=proof_of(exclusive), outcome="done")
    reconcile()
    assert _open(Condition.UNRESERVED_CHANGE) == []
    assert shared.reservation is not None
