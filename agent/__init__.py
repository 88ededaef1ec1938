"""The agent-side toolkit: HTTP client, lease keeper, the `leasehold` CLI and its MCP server.

It talks to a Leasehold server over HTTP only and imports none of the
server's apps (no Django), so it runs wherever an agent runs.
"""

from __future__ import annotations

__version__ = "0.1.0"
