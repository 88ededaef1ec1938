"""A small project with one row of every exported kind, built through the services, and the comparison of exports."""

from __future__ import annotations

import json
from bisect import bisect_right
from datetime import timedelta
from typing import Any, cast

from environments.services import environment_create
from landing.services import (
    CheckReport,
    LandingProof,
    LandingSettings,
    TaskResult,
    check_report,
    landing_claim_next,
    landing_finish,
    project_set_landing,
)
from leases.models import ReviewRequest
from leases.services import attempt_finish, lease_claim, note_add, review_decide
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import Agent, Project, Task, TaskStatus
from ledger.services import comment_add, decision_create, decision_supersede, dependency_add
from operations.transfer.rows import SECTION_BY_TYPE, columns, payload_references
from reconciliation.services import reconcile
from reconciliation.triage import attempt_discard
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of


def build_project(user: Any, slug: str = "src") -> Project:
    project = cast(Project, ProjectFactory(slug=slug, key_prefix=slug.upper()))
    worker = AgentFactory(handle=f"{slug}-worker", projects=[project])
    other = AgentFactory(handle=f"{slug}-other", projects=[project])
    environment_create(project=project, name="db-1", kind="database", actor=Actor(agent=worker))
    first = cast(Task, TaskFactory(project=project, title="First — ünïcode", description="x" * 300))
    second = TaskFactory(project=project, title="Second", labels=["a", "b"])
    third = TaskFactory(project=project, title="Third", status=TaskStatus.READY)
    dependency_add(task=second, blocked_by=first, actor=Actor(agent=worker))
    grant = lease_claim(task=first, agent=worker, environment="db-1", paths=["src/app"])
    note_add(proof=proof_of(grant), kind="progress", content="half way", next_steps=["finish"], important=True)
    attempt_finish(
        proof=proof_of(grant),
        outcome="review",
        result_summary="done, please review",
        usage={"input_tokens": 10, "output_tokens": 5, "cost_usd": "0.012345"},
    )
    review_decide(request=ReviewRequest.objects.get(task=first), outcome="approved", actor=Actor(user=user))
    older = decision_create(project=project, title="Use SQLite", actor=Actor(agent=worker), task=first)
    newer = decision_create(project=project, title="Use PostgreSQL", actor=Actor(user=user))
    decision_supersede(decision=older, by=newer, actor=Actor(user=user))
    comment_add(task=second, body="blocked on the first", actor=Actor(agent=other))
    lease_claim(task=third, agent=other, lease_seconds=600)  # live at export time
    attempt_discard(attempt=grant.attempt, actor=Actor(user=user), reason="superseded by a rewrite")
    # A lapsed lease the sweep has not expired yet: reconciliation opens a finding for it.
    lapsing = cast(Task, TaskFactory(project=project, title="Lapsing"))
    lease_claim(task=lapsing, agent=worker, lease_seconds=60)
    clock.freeze(clock.now() + timedelta(seconds=120))
    try:
        reconcile()
    finally:
        clock.unfreeze()
    _land_some(project, worker)
    return project


def _land_some(project: Project, worker: Any) -> None:
    """SPEC §21, §22: a check at a delivered head, one task landed and one sent back by a conflict."""
    Project.objects.filter(pk=project.pk).update(remote="https://git.example.com/src.git")
    project.refresh_from_db()
    project_set_landing(project=project, settings=LandingSettings(target_branch="main"), actor=SYSTEM)
    landed = cast(Task, TaskFactory(project=project, title="Landed"))
    conflicted = cast(Task, TaskFactory(project=project, title="Conflicted"))
    for number, task in enumerate((landed, conflicted), start=1):
        grant = lease_claim(task=task, agent=worker)
        attempt_finish(proof=proof_of(grant), outcome="done", git={"head_commit": f"{number:040x}", "pushed": True})
    # Delivered; the remote only made the heads fetchable (an import refuses one it cannot resolve).
    Project.objects.filter(pk=project.pk).update(remote="")
    project.refresh_from_db()
    check_report(project=project, agent=worker, report=CheckReport(commit=f"{1:040x}", name="tests", state="success"))
    lander = cast(Agent, AgentFactory(handle=f"{project.slug}-lander", projects=[project]))
    for outcome in ("landed", "conflict"):
        taken = landing_claim_next(project=project, agent=lander)
        assert taken is not None
        landing_finish(
            proof=LandingProof(landing_id=taken.landing.pk, token=taken.token, epoch=taken.landing.epoch, agent=lander),
            result=outcome,
            landed_commit="f" * 40 if outcome == "landed" else "",
            tasks=[TaskResult(key=taken.entries[0].task.key, outcome=outcome, paths=("app.py",))],
        )


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def normalized(text: str, prefixes: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows with every id replaced by its row's position among its type, and the slug and key prefix removed.

    Two exports of the same project compare equal this way exactly when they differ in ids, slug and prefix only.
    Free text (labels, event payloads) keeps the keys of the exported project: `prefixes` names both.
    """
    prefix = next(row["key_prefix"] for row in lines_of(text) if row["type"] == "project")
    for old in (prefix, *prefixes):
        text = text.replace(f"{old}-", "PREFIX-")
    rows = lines_of(text)
    ordinal: dict[str, dict[int, int]] = {}
    for row in rows:
        if "id" in row:
            known = ordinal.setdefault(row["type"], {})
            known[row["id"]] = len(known) + 1
    event_ids = sorted(ordinal.get("event", {}))
    result = []
    for row in rows:
        section = SECTION_BY_TYPE.get(row["type"])
        if "id" in row:
            row["id"] = ordinal[row["type"]][row["id"]]
        if section is not None:
            for column in columns(section):
                if column.references in SECTION_BY_TYPE and row[column.name] is not None:
                    row[column.name] = ordinal[column.references][row[column.name]]
        if row["type"] == "project":
            row.pop("slug"), row.pop("key_prefix")
        if row["type"] == "attempt" and row["event_id_at_claim"] is not None:
            row["event_id_at_claim"] = bisect_right(event_ids, row["event_id_at_claim"])
        if row["type"] == "event":
            payload = row["payload"]
            for key, target in payload_references(row["event_type"]).items():
                if isinstance(payload.get(key), int):
                    payload[key] = ordinal[target][payload[key]]
            for key in ("slug", "key_prefix"):
                payload.pop(key, None)
        result.append(row)
    return result
