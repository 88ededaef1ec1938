"""`leasehold mcp` (SPEC §13, §15.3): `server` runs it, `tools` are what a model can do, `holdings` the leases it keeps.

It imports `agent.client` and `agent.workspace`, nothing of the CLI (the CLI
launches it).
"""
