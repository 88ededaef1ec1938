from __future__ import annotations

import pytest
from django.core.management import call_command
from django_q.models import Schedule

from operations.schedules import SCHEDULES, ensure_schedules

pytestmark = pytest.mark.django_db


def test_schedules_exist_after_migrate_and_are_not_duplicated():
    ensure_schedules()
    ensure_schedules()
    rows = {s.name: (s.func, s.schedule_type, s.minutes) for s in Schedule.objects.all()}
    assert rows == {name: (func, Schedule.MINUTES, minutes) for name, func, minutes in SCHEDULES}


def test_every_scheduled_function_imports():
    from django.utils.module_loading import import_string

    for _, func, _ in SCHEDULES:
        assert callable(import_string(func))


def test_cluster_never_catches_up_missed_runs():
    from django.conf import settings

    assert settings.Q_CLUSTER["catch_up"] is False
    call_command("check")
