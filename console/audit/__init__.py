"""The record: what happened, what is wrong, and what was decided or said.

The audit log (`events.py`) and the timelines cut from it (`timeline.py`),
reconciliation's findings (`findings.py`; the actions that fit a finding and
its page's forms in `finding_triage.py`), the alerts that group events and
findings by task (`alerts.py`), and the append-only records people and
agents write (SPEC §16.2): decisions (`decisions.py`) and the task's
comments (`comments.py`, an inline of the Task page).
"""
