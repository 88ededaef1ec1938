"""The reconciliation runs page says which runs were `reconcile --full` and filters by it."""

from __future__ import annotations

import pytest

from reconciliation.models import ReconciliationRun, RunStatus

pytestmark = pytest.mark.django_db

RUNS = "/admin/reconciliation/reconciliationrun/"


def test_the_runs_list_shows_and_filters_full_runs(ops_client, ledger_admin, clock):
    incremental = ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.SUCCEEDED)
    full = ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.SUCCEEDED, full=True)

    page = ops_client.get(RUNS)
    assert page.status_code == 200
    body = page.content.decode()
    assert "column-full" in body

    only_full = ops_client.get(RUNS, {"full__exact": "1"})
    assert [run.pk for run in only_full.context["cl"].result_list] == [full.pk]
    only_incremental = ops_client.get(RUNS, {"full__exact": "0"})
    assert [run.pk for run in only_incremental.context["cl"].result_list] == [incremental.pk]

    detail = ops_client.get(f"{RUNS}{full.pk}/change/").content.decode()
    assert "field-full" in detail
