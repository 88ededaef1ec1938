"""What insight keeps for the readers of the fleet: counters and rollups kept by triggers, and job heartbeats.

None of these rows is history: each is derived from the ledger (and may be
rebuilt from it) or records what the scheduler last did. Their tables keep
the names they had before this room existed (`Meta.db_table`).
"""

from __future__ import annotations

from insight.models.agent_checkpoint import AgentCheckpoint
from insight.models.agent_day_tally import AgentDayTally, AgentDayTallyChange
from insight.models.event_tally import EventTally
from insight.models.incidents import Incident, IncidentRule, IncidentStatus
from insight.models.job_heartbeat import ERROR_MAX_CHARS, JobHeartbeat, JobName, JobOutcome
from insight.models.report_tally import NO_LEAD, LeadBucket, ReportDayTally, ReportDayTallyChange
from insight.models.rollups import NO_AGENT, NO_PROJECT, DayCounts, FleetDayTally, FleetDayTallyChange, TaskFirstReady
from insight.models.task_counts import TaskCount, TaskCountChange

__all__ = [
    "ERROR_MAX_CHARS",
    "NO_AGENT",
    "NO_LEAD",
    "NO_PROJECT",
    "AgentCheckpoint",
    "AgentDayTally",
    "AgentDayTallyChange",
    "DayCounts",
    "EventTally",
    "FleetDayTally",
    "FleetDayTallyChange",
    "Incident",
    "IncidentRule",
    "IncidentStatus",
    "JobHeartbeat",
    "JobName",
    "JobOutcome",
    "LeadBucket",
    "ReportDayTally",
    "ReportDayTallyChange",
    "TaskCount",
    "TaskCountChange",
    "TaskFirstReady",
]
