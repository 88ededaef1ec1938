"""The leases room's factories: attempts, notes, allocations and review requests, each made by the
services an agent's calls reach, so the lease token, its hash and the events are the service's own."""

from __future__ import annotations

from typing import Any

import factory

from leases.models import Allocation, Attempt, Note, ReviewRequest
from leases.services import HolderProof, LeaseGrant, attempt_finish, lease_claim, note_add
from tests.factories.environments import EnvironmentFactory
from tests.factories.ledger import AgentFactory, TaskFactory


def _member_of_the_task_project(attempt: Any) -> Any:
    return AgentFactory(projects=[attempt.task.project])


def _proof(grant: LeaseGrant) -> HolderProof:
    return HolderProof(
        attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=grant.attempt.agent
    )


class AttemptFactory(factory.Factory):
    """An active attempt claimed by `lease_claim`: `attempt.lease_token` is the raw token the claim handed
    out (only its hash is stored, derived as `leases.tokens` derives it), `attempt.grant` the whole grant.
    Any other keyword goes to `lease_claim` (`lease_seconds`, `branch`, `environment`, ...)."""

    class Meta:
        model = Attempt

    task = factory.SubFactory(TaskFactory)
    agent = factory.LazyAttribute(_member_of_the_task_project)

    @classmethod
    def _create(cls, model_class: type[Attempt], *args: Any, **kwargs: Any) -> Attempt:
        grant = lease_claim(**kwargs)
        attempt = grant.attempt
        attempt.lease_token = grant.token  # type: ignore[attr-defined]
        attempt.grant = grant  # type: ignore[attr-defined]
        return attempt


class NoteFactory(factory.Factory):
    """A progress note written by its attempt's holder through `note_add`."""

    class Meta:
        model = Note

    attempt = factory.SubFactory(AttemptFactory)
    kind = "progress"
    content = factory.Sequence(lambda n: f"Progress note {n}")

    @classmethod
    def _create(cls, model_class: type[Note], *args: Any, **kwargs: Any) -> Note:
        attempt = kwargs.pop("attempt")
        return note_add(proof=_proof(attempt.grant), **kwargs).note


class AllocationFactory(factory.Factory):
    """An active allocation: its environment, named in a claim of a task of the same project."""

    class Meta:
        model = Allocation

    environment = factory.SubFactory(EnvironmentFactory)
    task = factory.LazyAttribute(lambda o: TaskFactory(project=o.environment.project))

    @classmethod
    def _create(cls, model_class: type[Allocation], *args: Any, **kwargs: Any) -> Allocation:
        task, environment = kwargs["task"], kwargs["environment"]
        grant = lease_claim(task=task, agent=AgentFactory(projects=[task.project]), environment=environment.name)
        assert grant.allocation is not None
        return grant.allocation


class ReviewRequestFactory(factory.Factory):
    """An open review request: its task's attempt finished with the outcome `review` (SPEC §16)."""

    class Meta:
        model = ReviewRequest

    attempt = factory.SubFactory(AttemptFactory)
    result_summary = "Done; please review."
    head_commit = "c" * 40

    @classmethod
    def _create(cls, model_class: type[ReviewRequest], *args: Any, **kwargs: Any) -> ReviewRequest:
        attempt = kwargs["attempt"]
        attempt_finish(
            proof=_proof(attempt.grant),
            outcome="review",
            result_summary=kwargs["result_summary"],
            git={"head_commit": kwargs["head_commit"]},
        )
        return ReviewRequest.objects.get(work_attempt=attempt)
