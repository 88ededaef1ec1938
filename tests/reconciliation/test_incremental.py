"""SPEC §25: a run reads the ended attempts that changed since its watermark, in chunks, and writes per chunk."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from leases.models import Attempt
from leases.services import attempt_finish, lease_claim
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from reconciliation import ended, incremental, recording
from reconciliation.models import Condition, Finding, FindingStatus, ReconcileCursor, RunStatus
from reconciliation.services import reconcile
from reconciliation.triage import finding_resolve
from tests.factories import ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld, git
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db

GRACE_PASSED = 11 * 60


@pytest.fixture
def reads(monkeypatch) -> list[list[int]]:
    """The ids of every chunk of ended attempts read, chunk by chunk."""
    chunks: list[list[int]] = []
    original = ended._read

    def spy(queryset):
        attempts = original(queryset)
        chunks.append([attempt.id for attempt in attempts])
        return attempts

    monkeypatch.setattr(ended, "_read", spy)
    return chunks


def read_ids(chunks: list[list[int]]) -> set[int]:
    return {attempt_id for chunk in chunks for attempt_id in chunk}


def completed_on(world: GitWorld, project, branch: str, *, commits: int = 1) -> Attempt:
    """A completed attempt whose branch exists, with work of its own (not merged)."""
    world.branch(branch, commits=commits)
    tip = git("rev-parse", f"refs/heads/{branch}", cwd=world.clone)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch=branch)
    attempt_finish(proof=proof_of(grant), outcome="review", git={"head_commit": tip, "commits_ahead": commits})
    return Attempt.objects.get(pk=grant.attempt.pk)


def open_findings(condition: str = Condition.COMPLETED_BRANCH_MISSING) -> set[str]:
    unresolved = Finding.objects.filter(condition=condition).exclude(status=FindingStatus.RESOLVED)
    return set(unresolved.values_list("subject_key", flat=True))


def test_a_branch_deleted_after_the_watermark_is_seen_by_the_next_incremental_run(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    attempt = completed_on(world, project, "feature/kept")
    clock.advance(GRACE_PASSED)
    assert reconcile().counts[Condition.COMPLETED_BRANCH_MISSING] == 0
    assert ReconcileCursor.objects.get(project=project).watermark_at == clock.now()

    clock.advance(3600)  # long after the attempt ended: only git changed
    git("branch", "-D", "feature/kept", cwd=world.clone)
    run = reconcile()

    assert not run.full
    assert open_findings() == {str(attempt.pk)}
    assert run.counts[Condition.COMPLETED_BRANCH_MISSING] == 1


def test_an_attempt_that_ends_after_the_watermark_is_judged_once_its_grace_is_over(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    reconcile()
    attempt = completed_on(world, project, "feature/short-lived")
    git("branch", "-D", "feature/short-lived", cwd=world.clone)

    reconcile()  # within the grace period: not yet
    assert open_findings() == set()

    clock.advance(GRACE_PASSED)
    reconcile()
    assert open_findings() == {str(attempt.pk)}


def test_an_old_unchanged_attempt_is_not_read_again(tmp_path, clock, reads):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    old = completed_on(world, project, "feature/old")
    clock.advance(3600)
    reconcile()
    assert old.pk in read_ids(reads)  # the first run scans the window

    reads.clear()
    clock.advance(3600)
    newer = completed_on(world, project, "feature/newer")
    reconcile()

    assert read_ids(reads) == {newer.pk}


def test_a_first_run_on_a_big_history_is_read_and_written_in_chunks(tmp_path, clock, reads, monkeypatch):
    monkeypatch.setattr(ended, "ENDED_CHUNK", 3)
    writes: list[int] = []
    original_write = recording.write_chunk

    def counting_write(**kwargs):
        writes.append(len(kwargs["observations"]))
        return original_write(**kwargs)

    monkeypatch.setattr(incremental, "write_chunk", counting_write)
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    attempts = [completed_on(world, project, f"feature/gone-{number}") for number in range(8)]
    for number in range(8):
        git("branch", "-D", f"feature/gone-{number}", cwd=world.clone)
    clock.advance(GRACE_PASSED)

    run = reconcile()

    assert [len(chunk) for chunk in reads] == [3, 3, 2]
    assert writes == [0, 3, 3, 2, 0]  # the scan's start, one transaction per chunk, the watermark
    assert open_findings() == {str(attempt.pk) for attempt in attempts}
    assert run.opened == 8
    cursor = ReconcileCursor.objects.get(project=project)
    assert (cursor.scan_after_id, cursor.watermark_at) == (None, clock.now())


def test_an_interrupted_scan_resumes_from_its_cursor_and_opens_nothing_twice(tmp_path, clock, reads, monkeypatch):
    monkeypatch.setattr(ended, "ENDED_CHUNK", 2)
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    attempts = [completed_on(world, project, f"feature/lost-{number}") for number in range(5)]
    for number in range(5):
        git("branch", "-D", f"feature/lost-{number}", cwd=world.clone)
    clock.advance(GRACE_PASSED)
    judged: list[int] = []
    original_judge = incremental._judge

    def judge_then_stop(view, chunk, *args, **kwargs):
        if len(judged) == 2:
            raise RuntimeError("the job's timeout")
        judged.append(len(chunk.attempts))
        return original_judge(view, chunk, *args, **kwargs)

    monkeypatch.setattr(incremental, "_judge", judge_then_stop)
    with pytest.raises(RuntimeError):
        reconcile()
    cursor = ReconcileCursor.objects.get(project=project)
    assert cursor.scan_after_id == attempts[3].pk
    assert open_findings() == {str(attempt.pk) for attempt in attempts[:4]}

    monkeypatch.setattr(incremental, "_judge", original_judge)
    reads.clear()
    clock.advance(60)
    run = reconcile()

    assert run.status == RunStatus.SUCCEEDED
    assert open_findings() == {str(attempt.pk) for attempt in attempts}
    assert run.opened == 1
    assert Event.objects.filter(type=EventType.FINDING_OPENED).count() == 5
    assert attempts[4].pk in read_ids(reads)
    assert ReconcileCursor.objects.get(project=project).scan_after_id is None


def test_a_finding_resolved_by_hand_while_its_condition_holds_opens_again(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    attempt = completed_on(world, project, "feature/deleted")
    git("branch", "-D", "feature/deleted", cwd=world.clone)
    clock.advance(GRACE_PASSED)
    reconcile()
    first = Finding.objects.get()
    clock.advance(3600)
    finding_resolve(finding=first, actor=SYSTEM, note="looked fine to me")

    clock.advance(60)
    run = reconcile()

    assert run.opened == 1
    second = Finding.objects.exclude(pk=first.pk).get()
    assert (second.subject_key, second.status) == (str(attempt.pk), FindingStatus.OPEN)


def test_a_reservation_claimed_after_the_watermark_is_compared_with_older_finished_branches(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    base = git("rev-parse", "main", cwd=world.clone)
    git("checkout", "-q", "-b", "feature/touches-lib", cwd=world.clone)
    (world.clone / "lib").mkdir()
    world.commit_file("lib/core.py", "x\n", "change lib")
    git("checkout", "-q", "main", cwd=world.clone)
    grant = lease_claim(
        task=TaskFactory(project=project), agent=agent_in(project), branch="feature/touches-lib", base_commit=base
    )
    attempt_finish(proof=proof_of(grant), outcome="review")
    clock.advance(3600)
    reconcile()
    assert open_findings(Condition.UNRESERVED_CHANGE) == set()

    clock.advance(3600)
    lease_claim(task=TaskFactory(project=project, paths=["lib"]), agent=agent_in(project))
    reconcile()

    assert open_findings(Condition.UNRESERVED_CHANGE) == {str(grant.attempt.pk)}


def test_reconcile_full_reads_every_ended_attempt_again(tmp_path, clock, reads):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    old = completed_on(world, project, "feature/old")
    clock.advance(3600)
    reconcile()
    reads.clear()
    clock.advance(3600)
    out = io.StringIO()

    call_command("reconcile", "--full", stdout=out)

    assert old.pk in read_ids(reads)
    assert "(full)" in out.getvalue().splitlines()[0]
    cursor = ReconcileCursor.objects.get(project=project)
    assert (cursor.scan_after_id, cursor.watermark_at) == (None, clock.now())
