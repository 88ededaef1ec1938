"""The landing queue in the console (SPEC §21.1): a project's queue, live landing and results, and its settings."""
