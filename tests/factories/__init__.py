"""Factories per room (factory-boy, typed), each building through its room's services so every object
carries its events; `from tests.factories import X` finds them all.

A factory whose row no service writes by hand (a finding, written by the reconciler) builds the row
itself, with the fields a test does not care about filled in.
"""

from __future__ import annotations

from tests.factories.environments import EnvironmentFactory
from tests.factories.leases import AllocationFactory, AttemptFactory, NoteFactory, ReviewRequestFactory
from tests.factories.ledger import AgentFactory, ProjectFactory, TaskFactory
from tests.factories.push import WebhookEndpointFactory
from tests.factories.reconciliation import FindingFactory

__all__ = [
    "AgentFactory",
    "AllocationFactory",
    "AttemptFactory",
    "EnvironmentFactory",
    "FindingFactory",
    "NoteFactory",
    "ProjectFactory",
    "ReviewRequestFactory",
    "TaskFactory",
    "WebhookEndpointFactory",
]
