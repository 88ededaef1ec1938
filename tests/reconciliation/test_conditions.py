"""The edges of each condition: when it must not fire, and what its finding says."""

from __future__ import annotations

import pytest

from environments.services import environment_create
from leases.services import attempt_finish, attempt_renew, lease_claim
from ledger.actors import SYSTEM
from ledger.services import agent_heartbeat
from reconciliation.models import Condition, Finding, FindingStatus, SubjectType
from reconciliation.services import reconcile
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of
from tests.reconciliation.gitworld import GitWorld
from tests.reconciliation.scenarios import agent_in

pytestmark = pytest.mark.django_db


def conditions() -> set[str]:
    return set(Finding.objects.exclude(status=FindingStatus.RESOLVED).values_list("condition", flat=True))


def test_a_silent_agent_that_never_sent_a_heartbeat_is_dead_only_once_its_attempt_is_older_than_the_window(clock):
    project = ProjectFactory()
    grant = lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]), lease_seconds=3600)
    clock.advance(599)
    attempt_renew(proof=proof_of(grant))
    reconcile()
    assert conditions() == set()

    clock.advance(2)
    reconcile()
    finding = Finding.objects.get(condition=Condition.LIVE_LEASE_DEAD_AGENT)
    assert finding.attempt_id == grant.attempt.pk
    assert finding.detail["agent_last_seen_at"] is None


def test_a_lease_not_renewed_within_its_length_is_not_a_live_lease_of_a_dead_agent(clock):
    project = ProjectFactory()
    agent = agent_in(project)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    attempt_renew(proof=proof_of(grant), lease_seconds=3600)  # one long extension, then nothing
    clock.advance(700)
    reconcile()
    assert conditions() == set()

    attempt_renew(proof=proof_of(grant))  # renewed now: something is keeping it alive
    reconcile()
    assert conditions() == {Condition.LIVE_LEASE_DEAD_AGENT}


def test_branch_missing_waits_out_the_grace_period(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    project = ProjectFactory(repository=str(world.clone))
    agent = agent_in(project)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch="feature/new-work")
    clock.advance(9 * 60)
    agent_heartbeat(agent=agent)
    reconcile()
    assert conditions() == set()

    clock.advance(2 * 60)
    agent_heartbeat(agent=agent)
    reconcile()
    finding = Finding.objects.get()
    assert (finding.condition, finding.subject_type) == (Condition.BRANCH_MISSING, SubjectType.ATTEMPT)
    assert finding.detail["branch"] == "feature/new-work"
    assert finding.task_id == grant.attempt.task_id


def test_a_repository_known_by_url_is_read_with_ls_remote(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("feature/local-only")
    project = ProjectFactory(repository=world.url)
    agent = agent_in(project)
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600, branch="feature/local-only")
    clock.advance(11 * 60)
    agent_heartbeat(agent=agent)
    run = reconcile()
    assert run.errors == []
    assert conditions() == {Condition.BRANCH_MISSING}  # the branch exists in the clone, not in the remote

    world.push("feature/local-only")
    reconcile()
    assert conditions() == set()


def test_orphan_branch_of_a_url_repository_says_its_merge_state_is_unknown(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("fix/abandoned", commits=1)
    world.push("fix/abandoned")
    project = ProjectFactory(repository=world.url)
    grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="fix/abandoned")
    attempt_finish(proof=proof_of(grant), outcome="handoff", interruption_reason_code="context_limit")
    reconcile()
    finding = Finding.objects.get()
    assert finding.condition == Condition.ORPHAN_BRANCH
    assert finding.detail["merged"] is None
    assert finding.detail["commits_ahead"] is None


def test_orphan_branch_counts_commits_and_names_the_latest_attempt(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("feature/failed-twice", commits=3)
    project = ProjectFactory(repository=str(world.clone))
    task = TaskFactory(project=project)
    for _ in range(2):
        grant = lease_claim(task=task, agent=agent_in(project), branch="feature/failed-twice")
        attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
    reconcile()
    finding = Finding.objects.get()
    assert finding.detail["commits_ahead"] == 3
    assert finding.detail["merged"] is False
    assert finding.detail["attempts"] == 2
    assert finding.attempt_id == grant.attempt.pk


@pytest.mark.parametrize(
    "case",
    ["completed", "merged", "still_active", "never_named", "deleted"],
)
def test_orphan_branch_is_not_reported_when_the_work_has_a_home(case, tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.branch("feature/work", commits=1)
    project = ProjectFactory(repository=str(world.clone))
    if case != "never_named":
        grant = lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/work")
        if case == "completed":
            attempt_finish(proof=proof_of(grant), outcome="done")
        elif case != "still_active":
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    if case == "merged":
        world.merge("feature/work")
    if case == "deleted":
        from tests.reconciliation.gitworld import git

        git("branch", "-D", "feature/work", cwd=world.clone)
    reconcile()
    assert conditions() == set()


def test_a_live_attempt_on_a_worktree_branch_is_not_an_orphan(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.add_worktree("feature/in-progress", commits=1)
    project = ProjectFactory(repository=str(world.clone))
    lease_claim(task=TaskFactory(project=project), agent=agent_in(project), branch="feature/in-progress")
    reconcile()
    assert conditions() == set()


def test_a_worktree_on_a_branch_no_attempt_named_is_not_the_ledgers_business(tmp_path, clock):
    world = GitWorld(tmp_path / "git")
    world.add_worktree("feature/a-humans-experiment", commits=1)
    ProjectFactory(repository=str(world.clone))
    reconcile()
    assert conditions() == set()


def test_environment_collision_names_the_shared_resource_and_the_other_environment(clock):
    project = ProjectFactory()
    url = "postgres://app@DB.example.com:5432/preview/"
    environment_create(project=project, name="a", kind="database", actor=SYSTEM, resources={"database_url": url})
    environment_create(
        project=project,
        name="b",
        kind="database",
        actor=SYSTEM,
        resources={"database_url": "postgresql://other@db.example.com:5432/preview"},
    )
    environment_create(
        project=project, name="c", kind="database", actor=SYSTEM, resources={"database_url": url + "other"}
    )
    for name in ("a", "b", "c"):
        lease_claim(task=TaskFactory(project=project), agent=agent_in(project), environment=name)
    reconcile()
    findings = {f.subject_key: f for f in Finding.objects.all()}
    assert set(findings) == {"a", "b"}
    collision = findings["a"].detail["collisions"]
    assert collision == [
        {
            "resource": "database_url",
            "value": "postgres://db.example.com:5432/preview",
            "with": [{"project": project.slug, "environment": "b"}],
        }
    ]


def test_environments_of_two_projects_collide_too(clock):
    first, second = ProjectFactory(), ProjectFactory()
    for project in (first, second):
        environment_create(
            project=project, name="box", kind="container", actor=SYSTEM, resources={"host_path": "/srv/box/"}
        )
        lease_claim(task=TaskFactory(project=project), agent=agent_in(project), environment="box")
    reconcile()
    assert sorted(Finding.objects.values_list("project_id", "condition")) == [
        (first.pk, Condition.ENVIRONMENT_COLLISION),
        (second.pk, Condition.ENVIRONMENT_COLLISION),
    ]
