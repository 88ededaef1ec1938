from __future__ import annotations

from django.urls import path

from runners.apis.runners import RunnerHeartbeatApi, RunnerRegisterApi

urlpatterns = [
    path("runners/register/", RunnerRegisterApi.as_view(), name="runner-register"),
    path("runners/heartbeat/", RunnerHeartbeatApi.as_view(), name="runner-heartbeat"),
]
