"""A run django-q2 killed at its timeout never records its end: job health counts it as a failure."""

from __future__ import annotations

import pytest

from insight.job_health import job_health
from insight.models.job_heartbeat import JobName
from insight.services.job_heartbeat import job_started

pytestmark = pytest.mark.django_db


def test_a_run_still_running_past_the_task_timeout_is_killed_and_counted(clock, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 240}
    job_started(name=JobName.RECONCILE)
    clock.advance(240)
    state = job_health(clock.now()).reconcile
    assert not state.killed  # still within its time
    assert not state.last_run_failed
    clock.advance(61 + 60)
    state = job_health(clock.now()).reconcile
    assert state.killed
    assert state.last_run_failed
    assert state.failures_seen == 1
    assert state.outcome_text == "killed"
    assert "240 s timeout" in state.error_text
    assert state in job_health(clock.now()).failing
    job_started(name=JobName.RECONCILE)  # the next run starts: no longer killed
    assert not job_health(clock.now()).reconcile.killed
