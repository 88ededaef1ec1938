"""Property: no JSON body, however odd, makes a mutating endpoint answer 5xx."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import attempt_url, holder

pytestmark = pytest.mark.django_db

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=60)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "lease_seconds",
    "branch",
    "base_commit",
    "environment",
    "environment_kind",
    "project",
    "task_class",
    "kind",
    "content",
    "next_steps",
    "important",
    "outcome",
    "result_summary",
    "failure_reason_code",
    "interruption_reason_code",
    "acknowledged_version",
    "title",
    "description",
    "status",
    "priority",
    "labels",
    "blocked_by",
    "expected_version",
    "attempt_id",
    "reason",
]
bodies = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6) | values
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _send(client, method, url, body, **headers):
    return getattr(client, method)(url, json.dumps(body), content_type="application/json", **headers)


@FUZZ
@given(body=bodies)
def test_claims_and_task_writes_never_answer_5xx(client, task, body):
    for method, url, extra in [
        ("post", f"/api/v1/tasks/{task.key}/claim/", {}),
        ("post", "/api/v1/claims/next/", {}),
        ("post", "/api/v1/tasks/", {}),
        ("patch", f"/api/v1/tasks/{task.key}/", {"HTTP_IF_MATCH": "1"}),
    ]:
        response = _send(client, method, url, body, **extra)
        assert response.status_code < 500, (url, body, response.content[:300])
        if response.status_code >= 400:
            assert set(response.json()) == {"error"}


@FUZZ
@given(body=bodies)
def test_holder_calls_never_answer_5xx(client, other_client, project, body):
    from tests.factories import TaskFactory

    task = TaskFactory(project=project)
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    for action in ("notes", "git", "renew", "finish", "release"):
        response = _send(client, "post", attempt_url(claim, action), body, **holder(claim))
        assert response.status_code < 500, (action, body, response.content[:300])
