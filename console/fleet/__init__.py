"""The fleet at work: who works, where, and whether the machinery runs.

Agents (`agents.py`, with their health page and levers in `agent_health.py`),
their attempts (`attempts.py`), the environments they work in
(`environments.py`) and the allocations of them (`allocations.py`), the
reconciliation runs (`runs.py`), the scheduled jobs' health (`jobs_health.py`)
and the probes at the root (`health.py`, routed by `health_urls.py`). The
admin index's fleet dashboard (`dashboard.py`, SVG from `charts.py`) reads
all of these.
"""
