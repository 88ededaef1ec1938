"""The models that moved to rooms of their own (reconciliation, insight, push) keep their tables and rows.

Migrates a database back to before the move, writes rows through the models as they were then
(`leases.Finding`, `leases.JobHeartbeat`, `ledger.WebhookEndpoint`, ...), migrates forward, and
reads the same rows through the moved models; then back again and forward again. The content
types follow the models both ways, so permissions and the admin's log entries go with them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from insight.models import JobHeartbeat
from push.models import WebhookEndpoint
from push.secret_box import decrypt
from reconciliation.models import Finding

BEFORE_THE_MOVE = [("leases", "0012_tally_changes"), ("ledger", "0012_task_counts")]
MOVED = {
    "reconciliation": ("leases", ("finding", "reconciliationrun", "attemptdiscard")),
    "insight": ("leases", ("jobheartbeat", "fleetdaytally", "fleetdaytallychange", "taskfirstready")),
    "push": ("ledger", ("webhookendpoint", "webhookdelivery")),
}
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)


def _latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _labels(model: str) -> set[str]:
    return set(ContentType.objects.filter(model=model).values_list("app_label", flat=True))


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_are_read_after_it_and_the_move_runs_both_ways() -> None:
    latest = _latest()
    finding_type = ContentType.objects.get(app_label="reconciliation", model="finding")
    view_finding = Permission.objects.get(content_type=finding_type, codename="view_finding")
    try:
        executor = _migrate(BEFORE_THE_MOVE)
        assert _labels("finding") == {"leases"}, "going back, the content type went back with the model"
        assert _labels("webhookendpoint") == {"ledger"}
        old = executor.loader.project_state(BEFORE_THE_MOVE).apps
        project = old.get_model("ledger", "Project").objects.create(
            slug="moved", name="Moved", key_prefix="MOV", created_at=AT
        )
        old.get_model("leases", "Finding").objects.create(
            condition="orphan_branch",
            project_id=project.pk,
            subject_type="branch",
            subject_key="feat/old",
            first_seen_at=AT,
            last_seen_at=AT,
        )
        old.get_model("leases", "JobHeartbeat").objects.create(name="sweep_expired", runs=7)
        old.get_model("ledger", "WebhookEndpoint").objects.create(
            url="https://hooks.example.org/x", secret="s" * 40, created_at=AT
        )

        _migrate(latest)
        finding = Finding.objects.get(subject_key="feat/old")
        assert (finding.project.slug, finding.condition, finding.first_seen_at) == ("moved", "orphan_branch", AT)
        assert JobHeartbeat.objects.get(name="sweep_expired").runs == 7
        assert decrypt(WebhookEndpoint.objects.get(url="https://hooks.example.org/x").secret) == "s" * 40
        for app, (_old, models) in MOVED.items():
            for model in models:
                assert _labels(model) == {app}, model
        # The same content type row, relabelled: its permissions (and group grants) came along.
        assert ContentType.objects.get(app_label="reconciliation", model="finding").pk == finding_type.pk
        assert Permission.objects.get(pk=view_finding.pk).content_type_id == finding_type.pk

        _migrate(BEFORE_THE_MOVE)
        assert _labels("jobheartbeat") == {"leases"}
        _migrate(latest)
        assert Finding.objects.filter(subject_key="feat/old").count() == 1
        assert _labels("jobheartbeat") == {"insight"}
    finally:
        _migrate(latest)
