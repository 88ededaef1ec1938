"""The job-health page shows a run killed at django-q2's timeout; Ledger admins see django-q2's failures."""

from __future__ import annotations

import pytest

from insight.models.job_heartbeat import JobName
from insight.services.job_heartbeat import job_started

pytestmark = pytest.mark.django_db


def test_the_job_health_page_shows_the_killed_run(ops_client, clock):
    job_started(name=JobName.SWEEP)
    clock.advance(400)
    page = ops_client.get("/admin/jobs/").content.decode()
    assert "killed: started 400 s ago and never ended" in page


def test_ledger_admins_see_django_qs_failed_tasks_read_only(client, ledger_admin, manager):
    client.force_login(manager)
    assert client.get("/admin/django_q/failure/").status_code == 403
    client.force_login(ledger_admin)
    assert client.get("/admin/django_q/failure/").status_code == 200
    assert client.post("/admin/django_q/failure/add/", {}).status_code == 403
