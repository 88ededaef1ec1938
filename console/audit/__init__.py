"""The record: what happened, what is wrong, and what was decided or said.

The audit log (`events.py`) and the timelines cut from it (`timeline.py`),
reconciliation's findings and their triage (`findings.py`), the alerts that
group events and findings by task (`alerts.py`), and the append-only records
people and agents write: decisions (`decisions.py`) and the task's comments
(`comments.py`, an inline of the Task page) (SPEC §16.2).
"""
