"""`leasehold runner`: the runner daemon (SPEC §23).

- `agent.runner.providers`: environment providers (§23.3), with `agent.runner.provider_commands`.
"""
