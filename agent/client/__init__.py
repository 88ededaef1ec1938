"""The agent API from Python (SPEC §8, §13): the HTTP client, its errors and shapes, the lease keeper.

- `api.LeaseholdClient`: one method per endpoint (with `reviews` and `feeds`),
  over `connection.ApiConnection` (errors, retries, idempotency keys, lease
  headers), which sends through `wire`;
- `errors`: one exception class per error code; `models`: the shapes the
  API answers with; `usage`: usage reports (SPEC §19); `text`: an answer or
  an error as text;
- `keeper.LeaseKeeper`: holds an attempt's lease while the work runs;
  `heartbeat.Heartbeat`: the run heartbeat.

HTTP only: nothing here imports the rest of the toolkit or the server.
`from agent.client import LeaseholdClient` is the entry point for callers;
the toolkit itself imports the modules by name.
"""

from __future__ import annotations

from agent.client.api import LeaseholdClient
from agent.client.connection import api_root
from agent.client.models import (
    GIT_FACTS,
    AttemptSummary,
    Changes,
    Claim,
    CompactTask,
    Event,
    Finished,
    Lease,
    NoteKind,
    NoteWritten,
    Outcome,
    Page,
    Project,
    Renewed,
    TaskText,
    TaskTextField,
    lease_fingerprint,
)

__all__ = [
    "GIT_FACTS",
    "AttemptSummary",
    "Changes",
    "Claim",
    "CompactTask",
    "Event",
    "Finished",
    "Lease",
    "LeaseholdClient",
    "NoteKind",
    "NoteWritten",
    "Outcome",
    "Page",
    "Project",
    "Renewed",
    "TaskText",
    "TaskTextField",
    "api_root",
    "lease_fingerprint",
]
