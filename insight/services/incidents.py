"""Opening, resolving, acknowledging, snoozing and assigning incidents (`insight.models.incidents`).

`incidents_check` is the job's work (`insight.jobs.check_incidents_job`, every
minute): it compares what the rules observe (`insight.incidents`) with the
open incidents and opens or resolves the difference. Each opening appends one
`incident.opened` event (warn) and each resolution one `incident.resolved`
(info), in the transaction of the change: those events are what webhooks
deliver, so a subject that stays bad for a day is notified once. The partial
unique index keeps two checks at once from opening one incident twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction

from core.db import write_transaction
from core.errors import ValidationFailed
from insight.incidents import Observation, incidents_observed
from insight.models.incidents import Incident, IncidentStatus
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import EventType, Project, Severity
from ledger.services import event_append

SNOOZE_MAX = timedelta(days=30)


@dataclass(frozen=True)
class IncidentCheck:
    opened: int
    resolved: int
    open: int

    def as_dict(self) -> dict[str, int]:
        return {"opened": self.opened, "resolved": self.resolved, "open": self.open}


def _payload(incident: Incident) -> dict[str, Any]:
    return {
        "incident": incident.pk,
        "rule": incident.rule,
        "subject": incident.subject,
        "title": incident.title,
        "opened_at": incident.opened_at.isoformat(),
        "detail": incident.detail,
    }


def _open(observation: Observation, now: datetime) -> Incident | None:
    snoozed = (
        Incident.objects.filter(rule=observation.rule, subject=observation.subject, snoozed_until__gt=now)
        .order_by("-id")
        .values_list("snoozed_until", flat=True)
        .first()
    )
    try:
        with transaction.atomic():
            incident = Incident.objects.create(
                rule=observation.rule,
                subject=observation.subject,
                project_id=observation.project_id,
                title=observation.title[:300],
                detail=observation.detail,
                opened_at=now,
                last_seen_at=now,
                notified=snoozed is None,
                snoozed_until=snoozed,
            )
    except IntegrityError:
        return None  # another check opened it first
    if incident.notified:
        event_append(
            type=EventType.INCIDENT_OPENED,
            actor=SYSTEM,
            at=now,
            project=Project(pk=observation.project_id) if observation.project_id else None,
            severity=Severity.WARN,
            payload=_payload(incident),
        )
    return incident


def _resolve(incident: Incident, now: datetime) -> bool:
    changed = Incident.objects.filter(pk=incident.pk, status=IncidentStatus.OPEN).update(
        status=IncidentStatus.RESOLVED, resolved_at=now, last_seen_at=now
    )
    if changed and incident.notified:
        payload = _payload(incident)
        payload["resolved_at"] = now.isoformat()
        payload["open_seconds"] = int((now - incident.opened_at).total_seconds())
        event_append(
            type=EventType.INCIDENT_RESOLVED,
            actor=SYSTEM,
            at=now,
            project=Project(pk=incident.project_id) if incident.project_id else None,
            payload=payload,
        )
    return bool(changed)


@write_transaction
def incidents_check() -> IncidentCheck:
    """Open an incident for each newly holding (rule, subject), resolve each open one that no longer holds.

    An incident that opens while an earlier one of the same rule and subject is snoozed inherits the snooze
    and appends no `incident.opened` (nor, later, `incident.resolved`): a flapping subject is not re-notified.
    """
    now = clock.now()
    observed = incidents_observed(now)
    open_incidents = {(row.rule, row.subject): row for row in Incident.objects.filter(status=IncidentStatus.OPEN)}
    opened = resolved = 0
    for key, incident in open_incidents.items():
        observation = observed.get(key)
        if observation is None:
            resolved += _resolve(incident, now)
        else:
            Incident.objects.filter(pk=incident.pk).update(
                last_seen_at=now, detail=observation.detail, title=observation.title[:300]
            )
    for key, observation in observed.items():
        if key not in open_incidents and _open(observation, now) is not None:
            opened += 1
    return IncidentCheck(opened=opened, resolved=resolved, open=len(open_incidents) - resolved + opened)


def _user(actor: Actor) -> Any:
    if actor.user is None:
        raise ValidationFailed("Only a person acknowledges, snoozes or assigns an incident.")
    return actor.user


@write_transaction
def incident_acknowledge(*, incident: Incident, actor: Actor) -> bool:
    """Someone is on it: recorded once (the first acknowledgement stands). Appends no event."""
    now = clock.now()
    return bool(
        Incident.objects.filter(pk=incident.pk, acknowledged_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=_user(actor)
        )
    )


@write_transaction
def incident_snooze(*, incident: Incident, actor: Actor, seconds: int) -> datetime | None:
    """Hide the incident from the dashboard for `seconds` (0: unsnooze); an incident of the same rule and subject
    opening meanwhile is not notified. At most 30 days. Returns the new `snoozed_until`."""
    _user(actor)
    if seconds < 0 or seconds > SNOOZE_MAX.total_seconds():
        raise ValidationFailed(
            f"A snooze lasts 0 s to {int(SNOOZE_MAX.total_seconds())} s.", details={"fields": {"seconds": ["range"]}}
        )
    until = clock.now() + timedelta(seconds=seconds) if seconds else None
    Incident.objects.filter(pk=incident.pk).update(snoozed_until=until)
    incident.snoozed_until = until
    return until


@write_transaction
def incident_assign(*, incident: Incident, assignee: Any, actor: Actor) -> None:
    """Name who is on it (None: nobody)."""
    _user(actor)
    Incident.objects.filter(pk=incident.pk).update(assignee=assignee)
    incident.assignee = assignee
