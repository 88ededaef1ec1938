"""Counting refused claims for the lease-conflict metric, outside the refused transaction."""

from __future__ import annotations

import logging

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F

from core.sqlite_writer import sqlite_writer_turn
from leases.models import ClaimRefusalTally
from ledger import clock
from ledger.models import Agent

logger = logging.getLogger(__name__)


def tally_claim_refusal(*, project_id: int, agent: Agent) -> None:
    """Add one to today's count of this agent's TASK_TAKEN refusals in the project.

    Best effort: a failure to count never hides the refusal itself.
    """
    try:
        _tally(project_id=project_id, agent=agent)
    except DatabaseError:
        logger.exception("could not count a refused claim")


def _tally(*, project_id: int, agent: Agent) -> None:
    day = clock.now().date()
    for _ in range(2):
        with sqlite_writer_turn(), transaction.atomic():
            if ClaimRefusalTally.objects.filter(day=day, project_id=project_id, agent=agent).update(
                count=F("count") + 1
            ):
                return
            try:
                with transaction.atomic():
                    ClaimRefusalTally.objects.create(day=day, project_id=project_id, agent=agent, count=1)
                return
            except IntegrityError:
                continue  # another request of this agent created the row first
