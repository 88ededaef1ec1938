"""The django-q2 schedules of SPEC §9, created idempotently after every migrate.

Each entry is (name, job function, minutes between runs). Creating them is
an update-or-create by name: running migrate again, or on several servers,
never duplicates a schedule. A cluster that was down does not run missed
runs in a storm: `Q_CLUSTER["catch_up"]` is off.
"""

from __future__ import annotations

from typing import Any

SCHEDULES: tuple[tuple[str, str, int], ...] = (
    ("leases.sweep_expired", "leases.jobs.sweep_expired_job", 1),
    ("ledger.check_queue_wait", "leases.jobs.check_queue_wait_job", 5),
    ("environments.reconcile", "reconciliation.jobs.reconcile_job", 5),
    ("leases.purge_idempotency", "leases.jobs.purge_idempotency_job", 60),
    # Alerts as incidents: opens and resolves them, one webhook event each (docs/admin.md, "Incidents").
    ("insight.check_incidents", "insight.jobs.check_incidents_job", 1),
    # Follows for 50 s of each minute (returns at once with no active endpoint): docs/operations.md, "Webhooks".
    ("ledger.deliver_webhooks", "push.jobs.deliver_webhooks_job", 1),
    # SPEC §23.1: a runner silent for 3 heartbeats (45 s) is marked lost; every minute, django-q2's finest step.
    ("runners.mark_lost", "runners.jobs.mark_lost_runners_job", 1),
    # SPEC §25: the event table's month partitions, made three months ahead (PostgreSQL; docs/operations.md).
    ("operations.event_partitions", "operations.jobs.event_partitions_job", 1440),
)


# Daily, and only while LEASEHOLD_BACKUP_DIR is set (docs/operations.md, "Backup and restore").
BACKUP_SCHEDULE = ("leases.backup", "operations.jobs.backup_job")


def ensure_schedules(sender: Any = None, **kwargs: Any) -> None:
    from django.conf import settings
    from django_q.models import Schedule

    using = kwargs.get("using", "default")
    for name, func, minutes in SCHEDULES:
        Schedule.objects.using(using).update_or_create(
            name=name,
            defaults={"func": func, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1},
        )
    name, func = BACKUP_SCHEDULE
    if settings.LEASEHOLD_BACKUP_DIR:
        Schedule.objects.using(using).update_or_create(
            name=name, defaults={"func": func, "schedule_type": Schedule.DAILY, "repeats": -1}
        )
    else:
        # A schedule row, not a ledger row: unsetting the directory stops the backups.
        Schedule.objects.using(using).filter(name=name).delete()
