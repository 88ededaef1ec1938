"""The hot paths' plain-dict bodies (claim, finish) are exactly what their schema serializers render.

Claim and finish build their bodies by hand (`leases.apis.projections`);
every other endpoint renders the same shapes through `leases.apis.serializers`.
Compared as JSON text, so a field out of order would fail too.
"""

from __future__ import annotations

import json

import pytest

from leases.apis.projections import COMPACT_TASK_FIELDS, attempt_summary, compact_task, ended_task_row
from leases.apis.serializers import AttemptSummarySerializer, CompactTaskSerializer, FinishedSerializer
from leases.models import Attempt
from leases.selectors import with_compact_state
from ledger.models import Task
from tests.api.conftest import attempt_url, holder
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def _text(data) -> str:
    return json.dumps(data, separators=(",", ":"))


def _compact_row(task: Task, now) -> dict:
    return with_compact_state(Task.objects.filter(pk=task.pk), now=now).values(*COMPACT_TASK_FIELDS).get()


def test_a_claims_attempt_and_task_render_as_their_serializers_would(client, project, clock):
    task = TaskFactory(project=project, status="ready")
    body = {"branch": "claude/web-1-fix", "base_commit": "a" * 40}
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", body, format="json").json()
    attempt = Attempt.objects.select_related("task", "agent").get(pk=claim["attempt"]["id"])

    assert _text(claim["attempt"]) == _text(AttemptSummarySerializer(attempt).data)
    assert _text(claim["task"]) == _text(CompactTaskSerializer(_compact_row(task, clock.now())).data)


def test_a_finish_body_renders_as_its_serializer_would(client, project, clock):
    task = TaskFactory(project=project, status="ready")
    blocked = client.post(
        "/api/v1/tasks/", {"project": project.slug, "title": "Later", "blocked_by": [task.key]}, format="json"
    )
    assert blocked.status_code == 201
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    finished = client.post(attempt_url(claim, "finish"), {"outcome": "review"}, format="json", **holder(claim))
    assert finished.status_code == 200

    attempt = Attempt.objects.select_related("task", "agent").get(pk=claim["attempt"]["id"])
    task.refresh_from_db()
    rendered = FinishedSerializer({"attempt": attempt, "task": ended_task_row(task)}).data
    assert _text(finished.json()) == _text(rendered)
    assert rendered["task"]["blocked_by"] == 0
    assert rendered["attempt"]["branch"] is not None
    assert rendered["attempt"]["base_commit"] is None


def test_compact_rows_and_attempt_summaries_agree_with_their_serializers(client, project, clock):
    held = TaskFactory(project=project, status="ready")
    claim = client.post(f"/api/v1/tasks/{held.key}/claim/", {}, format="json").json()
    blocked = client.post(
        "/api/v1/tasks/", {"project": project.slug, "title": "Later", "blocked_by": [held.key]}, format="json"
    ).json()

    rows = with_compact_state(Task.objects.filter(project=project), now=clock.now()).values(*COMPACT_TASK_FIELDS)
    by_key = {row["key"]: row for row in rows}
    assert by_key[held.key]["holder_handle"] is not None
    assert by_key[blocked["key"]]["blocked_by_count"] == 1
    for row in rows:
        assert _text(compact_task(row)) == _text(CompactTaskSerializer(row).data)

    attempt = Attempt.objects.select_related("task", "agent").get(pk=claim["attempt"]["id"])
    assert _text(attempt_summary(attempt)) == _text(AttemptSummarySerializer(attempt).data)
