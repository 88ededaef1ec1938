"""The reconciliation room's factory: a finding as the reconciler records it (it writes findings itself, no
service opens one on request), seen first and last now by the ledger's clock."""

from __future__ import annotations

import factory
from factory.django import DjangoModelFactory

from ledger import clock
from reconciliation.models import Condition, Finding, SubjectType
from tests.factories.ledger import ProjectFactory


class FindingFactory(DjangoModelFactory):
    """An open orphan branch (`lh/orphan-N`) by default; pass `condition`, `subject_type`, `subject_key` and the
    subject (`attempt`, `environment`, `task`) for another condition."""

    class Meta:
        model = Finding

    condition = Condition.ORPHAN_BRANCH
    project = factory.SubFactory(ProjectFactory)
    subject_type = SubjectType.BRANCH
    subject_key = factory.Sequence(lambda n: f"lh/orphan-{n}")
    first_seen_at = factory.LazyFunction(clock.now)
    last_seen_at = factory.LazyAttribute(lambda o: o.first_seen_at)
