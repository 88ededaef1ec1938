"""The lease suggestion's samples: one row per completed attempt of a classed task, kept by triggers.

SPEC §3 sizes a lease without `lease_seconds` from the latest 1,000 completed
attempts of the task's class in its project. Those attempts cannot be found by
an index of the attempt table (the project and the class are the task's), so
the read walked every completed attempt in the database, newest first, until it
had found 1,000 of the class: all of them for a class with fewer (issue 33:
700,044 index lookups at 1M attempts). A `LeaseSample` carries the attempt's
project and class beside its two times, and the index `lease_sample_recent`
(project, class, finished_at descending, claimed_at) answers "the latest 1,000"
as one range of at most 1,000 index entries, whatever the history's size.

Written only by triggers (migration `leases.0019_lease_samples`), in the
transaction that writes the attempt or the task, so the samples are exactly
the rule's attempts by construction:

- an attempt is sampled while its status is `completed`, it has a
  `finished_at`, and its task's `task_class` is not empty (an unclassed task
  has no suggestion);
- the sample follows the task's current project and class: a task update
  that changes the class moves the task's samples (the rule reads the task's
  class as it is now, as the query over the attempts did).

Derived rows: not exported (an import's attempts fire the triggers again).
"""

from __future__ import annotations

from django.db import models

from leases.models.attempts import Attempt


class LeaseSample(models.Model):
    attempt = models.OneToOneField(Attempt, primary_key=True, on_delete=models.PROTECT, related_name="+")
    project_id = models.BigIntegerField()  # the task's; a plain id, like the tallies'
    task_class = models.CharField(max_length=64)
    claimed_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The whole read: equality on the first two, the order of the third, and the fourth
            # carried along (SQLite: a covering index; PostgreSQL: index-only once vacuumed).
            models.Index(fields=["project_id", "task_class", "-finished_at", "claimed_at"], name="lease_sample_recent"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id}: {self.task_class} in project {self.project_id}"
