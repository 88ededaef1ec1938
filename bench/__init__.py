"""Leasehold's benchmark suite: workloads through the services and HTTP, each against a raw-SQL reference.

Run it with `python -m bench run` (see docs/performance.md).
"""
