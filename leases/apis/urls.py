"""The lease-aware endpoints, mounted by `api.urls` under /api/v1/ (names in the `api` namespace).

The `taskkey` and `attemptid` converters are registered by `api.urls` before it includes this list.
"""

from __future__ import annotations

from django.urls import path

from api.base import route
from leases.apis.attempt_environment import AttemptEnvironmentApi
from leases.apis.attempt_tokens import AttemptTokenMintApi
from leases.apis.attempts import (
    AttemptDetailApi,
    AttemptFinishApi,
    AttemptGitApi,
    AttemptReleaseApi,
    AttemptRenewApi,
    NoteAddApi,
)
from leases.apis.claims import ClaimNextApi, TaskClaimApi
from leases.apis.dependencies import TaskDependencyAddApi, TaskDependencyRemoveApi
from leases.apis.graph import ProjectGraphApi, TaskGraphApi
from leases.apis.path_reservations import ReservationListApi
from leases.apis.reviews import ReviewClaimApi, ReviewDetailApi, ReviewListApi, ReviewNextApi
from leases.apis.search import SearchApi
from leases.apis.task_context import TaskContextApi, TaskTextApi
from leases.apis.task_reservations import TaskReservationClearApi
from leases.apis.tasks import TaskCreateApi, TaskDetailApi, TaskListApi, TaskUpdateApi

urlpatterns = [
    path("tasks/", route(get=TaskListApi, post=TaskCreateApi), name="tasks"),
    path("tasks/<taskkey:key>/", route(get=TaskDetailApi, patch=TaskUpdateApi), name="task"),
    path("tasks/<taskkey:key>/claim/", TaskClaimApi.as_view(), name="task-claim"),
    path("tasks/<taskkey:key>/context/", TaskContextApi.as_view(), name="task-context"),
    path("tasks/<taskkey:key>/text/", TaskTextApi.as_view(), name="task-text"),
    path("tasks/<taskkey:key>/graph/", TaskGraphApi.as_view(), name="task-graph"),
    path("projects/<slug:slug>/graph/", ProjectGraphApi.as_view(), name="project-graph"),
    path("tasks/<taskkey:key>/dependencies/", TaskDependencyAddApi.as_view(), name="task-dependencies"),
    path(
        "tasks/<taskkey:key>/dependencies/remove/", TaskDependencyRemoveApi.as_view(), name="task-dependencies-remove"
    ),
    path("tasks/<taskkey:key>/reservation/clear/", TaskReservationClearApi.as_view(), name="task-reservation-clear"),
    path("claims/next/", ClaimNextApi.as_view(), name="claim-next"),
    path("attempts/<attemptid:attempt_id>/", AttemptDetailApi.as_view(), name="attempt"),
    path("attempts/<attemptid:attempt_id>/renew/", AttemptRenewApi.as_view(), name="attempt-renew"),
    path("attempts/<attemptid:attempt_id>/notes/", NoteAddApi.as_view(), name="attempt-notes"),
    path("attempts/<attemptid:attempt_id>/finish/", AttemptFinishApi.as_view(), name="attempt-finish"),
    path("attempts/<attemptid:attempt_id>/release/", AttemptReleaseApi.as_view(), name="attempt-release"),
    path("attempts/<attemptid:attempt_id>/git/", AttemptGitApi.as_view(), name="attempt-git"),
    path("attempts/<attemptid:attempt_id>/token/", AttemptTokenMintApi.as_view(), name="attempt-token"),
    path("attempts/<attemptid:attempt_id>/environment/", AttemptEnvironmentApi.as_view(), name="attempt-environment"),
    path("reviews/", ReviewListApi.as_view(), name="reviews"),
    path("reviews/next/", ReviewNextApi.as_view(), name="review-next"),
    path("reviews/<attemptid:review_id>/", ReviewDetailApi.as_view(), name="review"),
    path("reviews/<attemptid:review_id>/claim/", ReviewClaimApi.as_view(), name="review-claim"),
    path("search/", SearchApi.as_view(), name="search"),
    path("reservations/", ReservationListApi.as_view(), name="reservations"),
]
