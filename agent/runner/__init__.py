"""`leasehold runner`: the runner daemon (SPEC §23), a fleet member on any machine, HTTP only.

- `agent.runner.config`: `runner.toml`, read and checked (unknown keys are errors).
- `agent.runner.daemon`: registration, the heartbeat, signals (drain), the clean-up after a restart.
- `agent.runner.slots`: one thread per slot: claim with the server-side wait, then a `run` child (or a
  lander child for landing slots).
- `agent.runner.children`: how a child is started (its own process group, the parent-death signal, the
  slot's environment) and what its log says.
- `agent.runner.providers`: environment providers (§23.3).

It imports the client, the workspace's state files and nothing of the CLI or the server.
"""

from __future__ import annotations
