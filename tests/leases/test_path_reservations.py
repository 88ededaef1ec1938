"""Path reservations (SPEC §19): overlap rules, the race, shared mode, and a lease's life as the reservation's."""

from __future__ import annotations

import itertools

import pytest

from core.errors import PathsReserved, TaskTaken, ValidationFailed
from leases.models import Attempt, AttemptStatus, PathReservation
from leases.selectors import live_reservations
from leases.services import (
    attempt_finish,
    attempt_release,
    lease_claim,
    lease_claim_next,
    task_force_release,
)
from ledger.actors import SYSTEM
from ledger.paths import normalise_paths, paths_overlap
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ("src", "src", True),
        ("src", "src/app.py", True),
        ("src/app", "src/application.py", False),
        ("docs/a.md", "docs/b.md", False),
        ("a/b/c", "a", True),
    ],
)
def test_overlap_is_equal_or_a_prefix_at_a_slash(first, second, overlap):
    assert paths_overlap(first, second) is overlap
    assert paths_overlap(second, first) is overlap


def test_paths_are_normalised_and_bad_ones_refused():
    assert normalise_paths(["./src//app/", "src/app", "docs"]) == ["src/app", "docs"]
    for bad in (["/etc/passwd"], ["src/../../x"], ["C:/x"], ["a\\b"], [""], ["."], [3], "src", ["x"] * 51):
        with pytest.raises(ValidationFailed) as refused:
            normalise_paths(bad)
        assert "paths" in refused.value.details["fields"]


def test_overlapping_exclusive_claim_is_refused_naming_the_other_task_and_paths():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    first = TaskFactory(project=project, paths=["src/api"])
    second = TaskFactory(project=project)
    lease_claim(task=first, agent=agent)
    with pytest.raises(PathsReserved) as refused:
        lease_claim(task=second, agent=agent, paths=["src/api/views.py", "README.md"])
    details = refused.value.details
    assert (details["task"], details["paths"], details["requested"]) == (first.key, ["src/api"], ["src/api/views.py"])
    assert refused.value.http_status == 409
    # A disjoint claim goes through; so does one without paths.
    assert lease_claim(task=second, agent=agent, paths=["src/apiary"]).reservation is not None


def test_shared_claims_coexist_but_exclusive_meets_shared():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    tasks = [TaskFactory(project=project, paths=["docs"], paths_mode="shared") for _ in range(3)]
    lease_claim(task=tasks[0], agent=agent)
    lease_claim(task=tasks[1], agent=agent)
    with pytest.raises(PathsReserved):
        lease_claim(task=tasks[2], agent=agent, paths=["docs/x.md"])  # exclusive by default
    assert lease_claim(task=tasks[2], agent=agent, paths_mode="shared").reservation.mode == "shared"


@pytest.mark.parametrize("ending", ["finish", "release", "revoke", "lapse"])
def test_a_reservation_lives_exactly_as_long_as_its_lease(clock, ending):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    first = TaskFactory(project=project, paths=["src"])
    second = TaskFactory(project=project, paths=["src/app.py"])
    grant = lease_claim(task=first, agent=agent, lease_seconds=60)
    with pytest.raises(PathsReserved):
        lease_claim(task=second, agent=agent)
    if ending == "finish":
        attempt_finish(proof=proof_of(grant), outcome="done")
    elif ending == "release":
        attempt_release(proof=proof_of(grant))
    elif ending == "revoke":
        task_force_release(task=first, actor=SYSTEM, reason="stop")
    else:
        clock.advance(61)  # nobody has noticed the lapse yet: the attempt is still `active`
        assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE
    assert not live_reservations(project=project, now=clock.now()).exists()
    assert lease_claim(task=second, agent=agent).reservation.paths == ("src/app.py",)


def test_claim_next_walks_past_reserved_candidates():
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    holder = TaskFactory(project=project, paths=["lib"], priority=9)
    lease_claim(task=holder, agent=agent)
    TaskFactory(project=project, paths=["lib/core"], priority=5)
    free = TaskFactory(project=project, paths=["web"], priority=1)
    grant = lease_claim_next(project=project, agent=AgentFactory(projects=[project]))
    assert grant is not None
    assert grant.task.pk == free.pk
    # Only the reserved one is left: nothing is claimable now (not TASK_TAKEN).
    assert lease_claim_next(project=project, agent=agent) is None


def _overlapping_exclusive_live_pairs() -> list[tuple[int, int]]:
    live = list(
        PathReservation.objects.filter(attempt__status=AttemptStatus.ACTIVE, mode="exclusive").values_list(
            "attempt_id", "paths"
        )
    )
    return [
        (a, b)
        for (a, a_paths), (b, b_paths) in itertools.combinations(live, 2)
        if any(paths_overlap(x, y) for x in a_paths for y in b_paths)
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", ["claim", "claim_next"])
def test_sixteen_threads_on_sixteen_tasks_overlapping_in_pairs_give_eight_winners(door):
    threads = 16
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(threads)]
    # Tasks 2k and 2k+1 overlap (a directory and a file in it); pairs do not overlap each other.
    tasks = [
        TaskFactory(project=project, paths=[f"pkg{index // 2}" if index % 2 == 0 else f"pkg{index // 2}/mod.py"])
        for index in range(threads)
    ]

    def claim(index: int) -> object:
        try:
            if door == "claim":
                return lease_claim(task=tasks[index], agent=agents[index])
            return lease_claim_next(project=project, agent=agents[index])
        except (PathsReserved, TaskTaken) as refused:
            return refused.code

    results = run_in_threads(threads, claim)
    assert [r for r in results if isinstance(r, BaseException)] == []
    winners = [r for r in results if hasattr(r, "attempt")]
    assert len(winners) == threads // 2
    pair_of = {task.pk: index // 2 for index, task in enumerate(tasks)}
    assert len({pair_of[grant.task.pk] for grant in winners}) == threads // 2  # one winner per pair
    assert _overlapping_exclusive_live_pairs() == []
    assert Attempt.objects.filter(status=AttemptStatus.ACTIVE).count() == threads // 2


def test_a_refused_claim_writes_one_claim_paths_refused_event_per_refusal():
    from ledger.models import Event, EventType

    project = ProjectFactory()
    holder = AgentFactory(projects=[project])
    asker = AgentFactory(projects=[project])
    first = TaskFactory(project=project, paths=["src/api"])
    second = TaskFactory(project=project)
    held = lease_claim(task=first, agent=holder)
    for _ in range(2):
        with pytest.raises(PathsReserved):
            lease_claim(task=second, agent=asker, paths=["src/api/views.py", "README.md"])
    events = list(Event.objects.filter(type=EventType.CLAIM_PATHS_REFUSED).order_by("id"))
    assert len(events) == 2
    event = events[0]
    assert (event.task_id, event.project_id, event.actor_agent_id) == (second.pk, project.pk, asker.pk)
    assert event.severity == "warn"
    assert event.payload == {
        "holder": holder.handle,
        "holder_task": first.key,
        "holder_attempt": held.attempt.pk,
        "mode": "exclusive",
        "paths": ["src/api"],
        "requested": ["src/api/views.py"],
    }
    # The refused claim left nothing else behind: no attempt, no epoch.
    assert not Attempt.objects.filter(task=second).exists()
    # A claim that goes through writes none.
    lease_claim(task=second, agent=asker, paths=["docs"])
    assert Event.objects.filter(type=EventType.CLAIM_PATHS_REFUSED).count() == 2
