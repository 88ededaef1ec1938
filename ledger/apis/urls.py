"""The ledger's endpoints, mounted by `api.urls` under /api/v1/ (names in the `api` namespace)."""

from __future__ import annotations

from django.urls import path

from api.base import route
from ledger.apis.agents import AgentHeartbeatApi
from ledger.apis.changes import ChangesApi
from ledger.apis.changes_stream import ChangesStreamApi
from ledger.apis.discussion import (
    DecisionCreateApi,
    DecisionDetailApi,
    DecisionListApi,
    DecisionSupersedeApi,
    TaskCommentCreateApi,
    TaskCommentListApi,
)
from ledger.apis.plans import PlanApplyApi
from ledger.apis.projects import ProjectDetailApi, ProjectListApi

urlpatterns = [
    path("projects/", ProjectListApi.as_view(), name="projects"),
    path("projects/<slug:slug>/", ProjectDetailApi.as_view(), name="project"),
    path("plans/", PlanApplyApi.as_view(), name="plans"),
    path("changes/", ChangesApi.as_view(), name="changes"),
    path("changes/stream/", ChangesStreamApi.as_view(), name="changes-stream"),
    path("agents/me/heartbeat/", AgentHeartbeatApi.as_view(), name="agent-heartbeat"),
    path("decisions/", route(get=DecisionListApi, post=DecisionCreateApi), name="decisions"),
    path("decisions/<attemptid:decision_id>/", DecisionDetailApi.as_view(), name="decision"),
    path("decisions/<attemptid:decision_id>/supersede/", DecisionSupersedeApi.as_view(), name="decision-supersede"),
    path(
        "tasks/<taskkey:key>/comments/",
        route(get=TaskCommentListApi, post=TaskCommentCreateApi),
        name="task-comments",
    ),
]
