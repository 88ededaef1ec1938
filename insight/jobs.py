"""django-q2 entry points of insight, thin wrappers over its services (scheduled in `operations.schedules`)."""

from __future__ import annotations

from insight.models.job_heartbeat import JobName
from insight.services.event_tally import event_tally_catch_up
from insight.services.incidents import IncidentCheck, incidents_check
from insight.services.job_heartbeat import job_recorded


def check_incidents_job() -> IncidentCheck:
    """Open and resolve incidents (every minute): `insight.services.incidents.incidents_check`; first, count
    the events /metrics has not counted yet (after a restore or a bulk load, more than a scrape counts)."""

    def work() -> IncidentCheck:
        event_tally_catch_up()
        return incidents_check()

    return job_recorded(JobName.INCIDENTS, work, lambda check: (check.as_dict(), ""))
