"""`leasehold`, the agent's command line (SPEC §13): `leasehold.main` is the console script.

- `leasehold`: the parser, the dispatch, errors to exit codes (a call builds
  and imports only its own command: `lease_parsers` holds the lease's
  commands' parsers); `output`: the exit codes and what is printed;
- `commands` (login, claim, note, finish, …), `task_commands`,
  `plan_commands`, `review_commands`, `workspace_commands`, `connect`,
  `hooks`, `context_text`: what each command does;
- `run` and `run_end`: `leasehold run -- COMMAND…`, a command under a lease.

The top of the toolkit: it may import every other part (`leasehold mcp` is
`agent.mcp.server`); nothing outside it imports it.
"""

from __future__ import annotations

from agent.cli.leasehold import build_parser, main

__all__ = ["build_parser", "main"]
