"""Export → import → export is the same project but for ids, slug and key prefix (SPEC §17)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command

from leases.models import Attempt, AttemptStatus
from leases.services import sweep_expired
from ledger.models import Agent, Event, EventType, Project, Task
from operations.transfer.export import project_export
from push.models import DeliveryStatus, WebhookDelivery
from push.services.webhooks import webhook_create
from tests.operations.transfer.scenario import build_project, lines_of, normalized

pytestmark = pytest.mark.django_db


def _export(slug: str) -> str:
    out = io.StringIO()
    project_export(project=Project.objects.get(slug=slug), out=out)
    return out.getvalue()


def test_export_then_import_then_export_is_identical_but_for_ids_slug_and_prefix(admin_user, tmp_path):
    build_project(admin_user)
    first = _export("src")
    path = tmp_path / "src.jsonl"
    path.write_text(first)
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    second = _export("copy")
    assert normalized(second, ("SRC",)) == normalized(first)
    kinds = {row["type"] for row in lines_of(first)}
    assert {"task", "dependency", "attempt", "note", "allocation", "review", "decision", "comment", "event"} <= kinds
    assert {"attempt_usage", "task_usage", "project_usage", "reservation", "environment", "agent", "user"} <= kinds
    assert {"finding", "discard", "check", "landing", "landing_task"} <= kinds
    copied = Task.objects.filter(project__slug="copy").order_by("number")
    original = Task.objects.filter(project__slug="src").order_by("number")
    assert [(t.key, t.epoch, t.version, t.status) for t in copied] == [
        (t.key.replace("SRC-", "CPY-"), t.epoch, t.version, t.status) for t in original
    ]
    # The derived counts behind /metrics follow the imported rows (the task triggers).
    from django.db.models import Count

    from insight.status_counts import task_counts_by_status

    counted = Task.objects.values_list("project_id", "status").annotate(n=Count("id")).order_by()
    assert task_counts_by_status() == {(project_id, status): n for project_id, status, n in counted}
    # And the console's rollups (insight.models.rollups): the copy counts as the original does.
    from insight.models.rollups import FleetDayTally, TaskFirstReady
    from insight.services.rollups import fleet_tally_fold

    fleet_tally_fold()  # the tally as the readers see it: the folded rows plus the pending changes, all folded

    def tallies(slug):
        project = Project.objects.get(slug=slug)
        rows = FleetDayTally.objects.filter(project_id=project.pk)
        return sorted(rows.values_list("day", "agent_id", "claims", "finished", "contested"))

    def first_ready(slug):
        rows = TaskFirstReady.objects.filter(task__project__slug=slug)
        return sorted(rows.values_list("task__number", "ready_at"))

    assert tallies("copy") == tallies("src") != []
    assert first_ready("copy") == first_ready("src")


def test_imported_events_keep_their_order_and_their_payload_ids_point_at_the_copies(admin_user, tmp_path):
    build_project(admin_user)
    path = tmp_path / "src.jsonl"
    path.write_text(_export("src"))
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    source = list(Event.objects.filter(project__slug="src").order_by("id").values_list("type", "created_at"))
    copied = list(Event.objects.filter(project__slug="copy").order_by("id").values_list("type", "created_at"))
    assert copied == source
    assert min(e.id for e in Event.objects.filter(project__slug="copy")) > max(
        e.id for e in Event.objects.filter(project__slug="src")
    )
    superseded = Event.objects.get(project__slug="copy", type=EventType.DECISION_SUPERSEDED)
    from ledger.models import Decision

    assert Decision.objects.get(pk=superseded.payload["by"]).project.slug == "copy"
    assert Decision.objects.get(pk=superseded.payload["decision"]).superseded_by_id == superseded.payload["by"]


def test_an_imported_live_attempt_holds_no_token_and_the_sweep_expires_it(admin_user, tmp_path, clock):
    build_project(admin_user)
    path = tmp_path / "src.jsonl"
    path.write_text(_export("src"))
    assert "token_hash" not in path.read_text()
    assert "token_salt" not in path.read_text()
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    live = Attempt.objects.get(task__project__slug="copy", task__title="Third", status=AttemptStatus.ACTIVE)
    source = Attempt.objects.get(task__project__slug="src", task__title="Third", status=AttemptStatus.ACTIVE)
    assert live.token_hash != source.token_hash
    assert live.lease_expires_at == source.lease_expires_at
    clock.freeze(live.lease_expires_at + timedelta(seconds=1))
    sweep_expired()
    live.refresh_from_db()
    assert live.status == AttemptStatus.EXPIRED


def test_agents_missing_on_the_target_are_created_inactive_and_kept_ones_stay_as_they_are(admin_user, tmp_path):
    build_project(admin_user)
    text = _export("src").replace('"src-other"', '"newcomer"')
    path = tmp_path / "src.jsonl"
    path.write_text(text)
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    newcomer = Agent.objects.get(handle="newcomer")
    assert not newcomer.is_active
    assert newcomer.projects.filter(slug="copy").exists()
    assert Agent.objects.get(handle="src-worker").is_active
    assert Attempt.objects.filter(task__project__slug="copy", agent=newcomer).exists()


def test_imported_history_is_not_posted_to_webhooks(admin_user, tmp_path):
    from ledger.actors import SYSTEM

    build_project(admin_user)
    path = tmp_path / "src.jsonl"
    path.write_text(_export("src"))
    webhook_create(url="https://hooks.example.com/all", actor=SYSTEM)
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    deliveries = WebhookDelivery.objects.filter(event__project__slug="copy")
    assert deliveries.exists()
    assert set(deliveries.values_list("status", flat=True)) == {DeliveryStatus.DEAD}


def test_dry_run_checks_everything_and_writes_nothing(admin_user, tmp_path):
    build_project(admin_user)
    path = tmp_path / "src.jsonl"
    path.write_text(_export("src"))
    events = Event.objects.count()
    out = io.StringIO()
    call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", "--dry-run", stdout=out)
    assert "dry run" in out.getvalue()
    assert not Project.objects.filter(slug="copy").exists()
    assert Event.objects.count() == events


def test_export_command_refuses_an_existing_output_file_and_an_unknown_project(admin_user, tmp_path):
    from django.core.management.base import CommandError

    build_project(admin_user)
    existing = tmp_path / "there.jsonl"
    existing.write_text("keep me")
    with pytest.raises(CommandError, match="exists"):
        call_command("export_project", "src", "--output", str(existing), stderr=io.StringIO())
    assert existing.read_text() == "keep me"
    with pytest.raises(CommandError, match="NOT_FOUND"):
        call_command("export_project", "nope", "--output", str(tmp_path / "x.jsonl"))
    call_command("export_project", "src", "--output", str(tmp_path / "ok.jsonl"), stderr=io.StringIO())
    assert lines_of((tmp_path / "ok.jsonl").read_text())[-1]["type"] == "end"


def test_the_export_holds_no_token_hash_salt_or_webhook_secret(admin_user):
    from ledger.actors import SYSTEM

    project = build_project(admin_user)
    endpoint, secret = webhook_create(url="https://hooks.example.com/src", actor=SYSTEM, project=project)
    text = _export("src")
    hashes = [
        *Agent.objects.values_list("token_hash", flat=True),
        *Attempt.objects.values_list("token_hash", flat=True),
    ]
    salts = list(Attempt.objects.values_list("token_salt", flat=True))
    assert [value for value in [*hashes, *salts, secret, endpoint.secret] if value in text] == []
    assert "token" not in {key for row in lines_of(text) for key in row}


def test_a_project_with_nothing_but_tasks_round_trips(tmp_path):
    from tests.factories import ProjectFactory, TaskFactory

    project = ProjectFactory(slug="bare", key_prefix="BARE")
    TaskFactory(project=project, title="alone")
    first = _export("bare")
    path = tmp_path / "bare.jsonl"
    path.write_text(first)
    call_command("import_project", str(path), "--as", "bare2", "--key-prefix", "BARE2", stdout=io.StringIO())
    assert normalized(_export("bare2"), ("BARE",)) == normalized(first)


def test_every_model_of_the_rooms_is_exported_or_left_out_with_a_reason():
    """A new model must be placed: in a section of the export, or in NOT_EXPORTED with why."""
    from django.apps import apps

    from operations.transfer.rows import NOT_EXPORTED, SECTIONS

    exported = {section.model._meta.label for section in SECTIONS}
    models = {
        model._meta.label
        for app in ("ledger", "environments", "leases", "reconciliation", "landing", "runners", "insight", "push")
        for model in apps.get_app_config(app).get_models()
    }
    assert models - exported == set(NOT_EXPORTED)
    assert not exported & set(NOT_EXPORTED)
