"""The work, as people steer it: projects, tasks and their reviews.

`tasks.py` is the Tasks page (the lease-aware list, the task's page and its
status actions); what it mixes in or shows sits beside it: `parts.py` (the
list filters, the claimability cell, the read-only inlines), `planning.py`
(edit, dependencies, reservation, status buttons, the queue), `cancel.py`,
`revoke.py` (force-release and reassign) and `quarantine.py` (those
actions). `projects.py` is the Projects page, `reviews.py` the Reviews page
(SPEC §16.1).
"""
