"""The lease clock: one narrow row per active attempt, its expiry, kept by triggers (SPEC §25).

A renewal moves `Attempt.lease_expires_at`. While that column was in an index of the attempt table
(`attempt_active_expiry`), PostgreSQL could not update the attempt's row in place (a heap-only update):
every renewal left a dead copy of a ~500-byte row and a new entry in each of its ten indexes (part two:
100,000 renewals left 98,762 dead rows and grew the expiry index 7.7 times). The expiry index lives here
instead, on a row of three columns that exists only while its attempt is active, so:

- a renewal's update of the attempt changes no indexed column and is heap-only (the table keeps free
  room on each page for it: `fillfactor`, migration `leases.0022_lease_clock`);
- the narrow row's update is the only non-heap-only write, and its table holds the live leases alone
  (autovacuum's threshold scales with that, not with the history);
- the sweep and claim-next's lapsed source read the lapsed leases in expiry order from `lease_clock_expiry`.

Written only by triggers on `leases_attempt` (migration `leases.0022_lease_clock`), in the transaction that
writes the attempt, so a row exists exactly while its attempt is active and carries its
`lease_expires_at` and `task_id`, whatever wrote the attempt (services, the sweep's set-based SQL, imports,
the bench's bulk rows). No Python writes it. Derived rows: not exported, never a record (a row is deleted
when its attempt ends; the attempt is the record).
"""

from __future__ import annotations

from django.db import models

from leases.models.attempts import Attempt


class LeaseClock(models.Model):
    attempt = models.OneToOneField(
        Attempt, primary_key=True, on_delete=models.DO_NOTHING, related_name="clock", db_constraint=False
    )
    task_id = models.BigIntegerField()  # the attempt's; a plain id, so the trigger's insert checks no key
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "leases_lease_clock"
        indexes = [
            # Serves the sweep and claim-next's lapsed source: live leases by expiry (SPEC §3, §25).
            models.Index(fields=["expires_at"], name="lease_clock_expiry"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} until {self.expires_at.isoformat()}"
