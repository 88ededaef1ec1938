"""What managers read about the work as a whole: the report, spend, the dependency graph.

The managers' report (`reports.py`, `/admin/reports/`) and its streamed CSV
exports (`exports.py`, whose cell rules the events CSV shares), budgets and
spend (`budgets.py`, SPEC §19: the "Set budget…" action of tasks, projects
and agents), and the dependency graph of the task and project pages
(`graph.py`, SPEC §17).
"""
