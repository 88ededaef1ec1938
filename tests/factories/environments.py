"""The environments room's factory: an environment of the catalog, created through its service."""

from __future__ import annotations

from typing import Any

import factory

from environments.models import Environment
from environments.services import environment_create
from ledger.actors import SYSTEM
from tests.factories.ledger import ProjectFactory


class EnvironmentFactory(factory.Factory):
    """A free database environment (`preview-N`, isolation `none`); `resources` as the service cleans them."""

    class Meta:
        model = Environment

    project = factory.SubFactory(ProjectFactory)
    name = factory.Sequence(lambda n: f"preview-{n}")
    kind = "database"
    isolation = "none"
    resources: Any = None

    @classmethod
    def _create(cls, model_class: type[Environment], *args: Any, **kwargs: Any) -> Environment:
        return environment_create(actor=SYSTEM, **kwargs)
