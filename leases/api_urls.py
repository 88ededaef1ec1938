"""URLs of the agent API, mounted at /api/v1/ (SPEC §8)."""

from __future__ import annotations

from django.urls import path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from leases.api_attempts import (
    AttemptDetailApi,
    AttemptFinishApi,
    AttemptGitApi,
    AttemptReleaseApi,
    AttemptRenewApi,
    NoteAddApi,
)
from leases.api_claims import ClaimNextApi, TaskClaimApi
from leases.api_metrics import MetricsApi
from leases.api_search import SearchApi
from leases.apis import TaskContextApi, TaskCreateApi, TaskDetailApi, TaskListApi, TaskUpdateApi
from ledger.api_base import NotFoundApi, route
from ledger.apis import AgentHeartbeatApi, ChangesApi, ProjectListApi


class TaskKeyConverter:
    """`WEB-412`. Anything else never reaches a view (it is NOT_FOUND)."""

    regex = "[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class AttemptIdConverter:
    """A positive id that fits a 64-bit column: no sign, no leading zero, at most 18 digits."""

    regex = "[1-9][0-9]{0,17}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(TaskKeyConverter, "taskkey")
register_converter(AttemptIdConverter, "attemptid")

urlpatterns = [
    path("projects/", ProjectListApi.as_view(), name="projects"),
    path("tasks/", route(get=TaskListApi, post=TaskCreateApi), name="tasks"),
    path("tasks/<taskkey:key>/", route(get=TaskDetailApi, patch=TaskUpdateApi), name="task"),
    path("tasks/<taskkey:key>/claim/", TaskClaimApi.as_view(), name="task-claim"),
    path("tasks/<taskkey:key>/context/", TaskContextApi.as_view(), name="task-context"),
    path("claims/next/", ClaimNextApi.as_view(), name="claim-next"),
    path("attempts/<attemptid:attempt_id>/", AttemptDetailApi.as_view(), name="attempt"),
    path("attempts/<attemptid:attempt_id>/renew/", AttemptRenewApi.as_view(), name="attempt-renew"),
    path("attempts/<attemptid:attempt_id>/notes/", NoteAddApi.as_view(), name="attempt-notes"),
    path("attempts/<attemptid:attempt_id>/finish/", AttemptFinishApi.as_view(), name="attempt-finish"),
    path("attempts/<attemptid:attempt_id>/release/", AttemptReleaseApi.as_view(), name="attempt-release"),
    path("attempts/<attemptid:attempt_id>/git/", AttemptGitApi.as_view(), name="attempt-git"),
    path("changes/", ChangesApi.as_view(), name="changes"),
    path("search/", SearchApi.as_view(), name="search"),
    path("agents/me/heartbeat/", AgentHeartbeatApi.as_view(), name="agent-heartbeat"),
    path("metrics/", MetricsApi.as_view(), name="metrics"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^.*$", NotFoundApi.as_view(), name="not-found"),
]
