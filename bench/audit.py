"""The correctness audit run after every workload: any non-zero count fails the run."""

from __future__ import annotations

AUDIT_QUERIES: dict[str, str] = {
    # SPEC §1.4: never two active attempts for one task.
    "duplicate_active_attempts": """
        SELECT count(*) FROM (
            SELECT task_id FROM leases_attempt WHERE status = 'active' GROUP BY task_id HAVING count(*) > 1
        ) dup
    """,
    # SPEC §1.5: each claim is a new epoch, so (task, epoch) names one attempt.
    "duplicate_epochs": """
        SELECT count(*) FROM (
            SELECT task_id, epoch FROM leases_attempt GROUP BY task_id, epoch HAVING count(*) > 1
        ) dup
    """,
    # SPEC §25: `held` marks exactly the tasks with an active attempt (the attempt table's triggers keep it).
    "held_disagrees_with_attempts": """
        SELECT count(*) FROM ledger_task t
        WHERE (CASE WHEN t.held THEN 1 ELSE 0 END)
            <> (CASE WHEN EXISTS (SELECT 1 FROM leases_attempt a WHERE a.task_id = t.id AND a.status = 'active')
                THEN 1 ELSE 0 END)
    """,
    # A task's epoch is at least that of every attempt it had.
    "task_epoch_behind_attempts": """
        SELECT count(*) FROM ledger_task t
        WHERE t.epoch < (SELECT max(a.epoch) FROM leases_attempt a WHERE a.task_id = t.id)
    """,
    # Stale writes by the clock: a note written by an attempt after the task's
    # next attempt was claimed.
    "stale_notes_by_time": """
        SELECT count(*) FROM leases_note n
        JOIN leases_attempt a ON a.id = n.attempt_id
        JOIN leases_attempt b ON b.task_id = a.task_id AND b.epoch = a.epoch + 1
        WHERE n.created_at > b.claimed_at
    """,
    # Stale writes by commit order: the events of one task draw their ids in
    # the order its writes commit (each service appends its events after the
    # row locks a later claim must wait for; SQLite serializes writers), so a
    # note's event after a later attempt's claim event is a write that landed late.
    "stale_notes_by_commit_order": """
        SELECT count(*) FROM ledger_event ne
        JOIN leases_attempt a ON a.id = ne.attempt_id
        JOIN leases_attempt b ON b.task_id = a.task_id AND b.epoch > a.epoch
        JOIN ledger_event ce ON ce.attempt_id = b.id AND ce.type = 'attempt.claimed'
        WHERE ne.type = 'note.added' AND ne.id > ce.id
    """,
}


def audit() -> dict[str, int]:
    """Run every audit query on the default database; returns name → count."""
    from django.db import connection

    counts = {}
    with connection.cursor() as cursor:
        for name, sql in AUDIT_QUERIES.items():
            cursor.execute(sql)
            (counts[name],) = cursor.fetchone()
    return counts


def failures(counts: dict[str, int]) -> dict[str, int]:
    return {name: count for name, count in counts.items() if count}
