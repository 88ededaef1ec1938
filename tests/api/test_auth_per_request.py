"""What every API request pays for around the service call (issue 20), and what it must still get.

The bearer token is checked by one prepared statement (`core.prepared`) on every request, with
nothing cached: a rotation or deactivation made by any process refuses the
old token on the very next request to any server process. A request with an
Authorization header skips the admin's session-user and messages middleware;
a browser's request does not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from api.auth import AgentPrincipal
from ledger.models import Agent
from ledger.selectors import agent_for_token
from tests.agent.live import LiveServer
from tests.api.conftest import assert_error
from tests.factories import AgentFactory


@pytest.mark.django_db
def test_the_token_reads_the_same_agent_row_as_the_orm(project):
    agent = AgentFactory(projects=[project])
    Agent.objects.filter(pk=agent.pk).update(
        last_seen_at=datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC),
        daily_budget_tokens=12345,
        daily_budget_cost_usd=Decimal("1.5"),
    )
    expected = Agent.objects.get(pk=agent.pk)

    found = agent_for_token(agent.api_token)

    assert found is not None
    assert found._state.adding is False
    assert found._state.db == expected._state.db
    for field in Agent._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name
        assert type(getattr(found, field.attname)) is type(getattr(expected, field.attname)), field.name
    assert found.last_seen_at is not None
    assert found.last_seen_at.tzinfo is not None


@pytest.mark.django_db
def test_a_deactivated_agent_or_an_unknown_token_reads_no_row(project):
    agent = AgentFactory(projects=[project])
    Agent.objects.filter(pk=agent.pk).update(is_active=False)

    assert agent_for_token(agent.api_token) is None
    assert agent_for_token("lh_" + "x" * 43) is None


@pytest.mark.django_db
def test_claim_next_reads_the_project_as_the_orm_does_and_only_the_agents_own(project):
    from core.errors import NotFound
    from ledger.models import Project
    from ledger.selectors import project_by_slug
    from tests.factories import ProjectFactory

    agent = AgentFactory(projects=[project])
    elsewhere = ProjectFactory(slug="elsewhere")
    expected = Project.objects.get(pk=project.pk)

    found = project_by_slug(project.slug, agent=agent)

    for field in Project._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name
    with pytest.raises(NotFound):
        project_by_slug(elsewhere.slug, agent=agent)
    with pytest.raises(NotFound):
        project_by_slug("sample:slug-0", agent=agent)  # the statement's own sample finds nothing
    assert project_by_slug(elsewhere.slug).pk == elsewhere.pk  # staff sees every project


def _in_another_process(server: LiveServer, statement: str) -> list[str]:
    """Run `statement` in a process of its own, as the admin (or another server worker) would; its last line."""
    return (
        server.manage(
            "shell",
            "-c",
            "from ledger.models import Agent; from ledger.actors import SYSTEM; "
            "from ledger.services.agents import agent_rotate_token, agent_deactivate; "
            "agent = Agent.objects.get(handle='rotating'); " + statement,
        )
        .strip()
        .splitlines()[-1:]
    )


def test_a_rotation_or_deactivation_in_another_process_refuses_the_token_at_the_next_request(tmp_path):
    server = LiveServer(tmp_path / "server", on_suite_database=True).start()
    try:
        server.manage("create_project", "web", "--name", "Web")
        old = server.create_agent("rotating", project="web")
        with httpx.Client(base_url=server.url, timeout=30) as http:

            def answer(token: str) -> httpx.Response:
                return http.get("/api/v1/projects/", headers={"Authorization": f"Bearer {token}"})

            # The server process has authenticated the token: whatever it could cache, it has.
            assert [answer(old).status_code for _ in range(5)] == [200] * 5

            [new] = _in_another_process(server, "print(agent_rotate_token(agent=agent, actor=SYSTEM)[1])")

            refused = answer(old)  # at once: no wait, no retry
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "AUTHENTICATION_FAILED"
            assert answer(new).status_code == 200

            _in_another_process(server, "agent_deactivate(agent=agent, actor=SYSTEM, reason='test')")

            assert answer(new).status_code == 401
            assert answer(old).status_code == 401
    finally:
        server.stop()


@pytest.mark.django_db
def test_a_bearer_request_is_answered_without_the_session_middleware(client, project, admin_user):
    client.force_login(admin_user)  # a staff session cookie rides along; the token alone decides

    response = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json")

    assert response.status_code == 204
    assert "_messages" not in response.wsgi_request.__dict__
    assert isinstance(response.wsgi_request.user, AgentPrincipal)  # DRF's, not the session's lazy user
    assert "Set-Cookie" not in response
    assert "Cookie" not in response.get("Vary", "")
    assert response["X-Frame-Options"] == "DENY"  # the middleware API answers keep still runs


@pytest.mark.django_db
def test_a_browser_request_still_gets_the_session_user(project, admin_user):
    from rest_framework.test import APIClient

    browser = APIClient()
    browser.force_login(admin_user)

    response = browser.get("/api/v1/projects/")

    assert response.status_code == 200
    assert response.wsgi_request.user == admin_user
    assert "_messages" in response.wsgi_request.__dict__


@pytest.mark.django_db
def test_a_bad_bearer_token_with_a_staff_session_is_still_refused(project, admin_user):
    from rest_framework.test import APIClient

    browser = APIClient()
    browser.force_login(admin_user)
    browser.credentials(HTTP_AUTHORIZATION="Bearer lh_not-a-token")

    assert_error(browser.get("/api/v1/projects/"), 401, "AUTHENTICATION_FAILED")


# What DRF's own negotiation answers (measured before the JSON shortcut of `api.base.ApiView`).
ANSWER_BY_ACCEPT = {
    None: (404, "application/json", b'{"error":{"code":"NOT_FOUND"'),
    "*/*": (404, "application/json", b'{"error":{"code":"NOT_FOUND"'),
    "application/json": (404, "application/json", b'{"error":{"code":"NOT_FOUND"'),
    "application/*": (404, "application/json", b'{"error":{"code":"NOT_FOUND"'),
    "application/json; indent=2": (404, "application/json", b'{\n  "error": {\n    "code": "NOT_FOUND"'),
    "text/html": (404, "text/html; charset=utf-8", b"\n"),
    "": (406, "application/json", b'{"error":{"code":"NOT_ACCEPTABLE"'),
    "text/plain": (406, "application/json", b'{"error":{"code":"NOT_ACCEPTABLE"'),
}


@pytest.mark.django_db
@pytest.mark.parametrize("accept", list(ANSWER_BY_ACCEPT))
@pytest.mark.parametrize("query", ["", "?format=json"])
def test_each_accept_header_gets_the_answer_drf_negotiates(client, accept, query):
    status, content_type, start = ANSWER_BY_ACCEPT[accept]
    if query and accept == "text/html":
        status, content_type, start = 406, "application/json", b'{"error":{"code":"NOT_ACCEPTABLE"'
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}

    response = client.post(f"/api/v1/claims/next/{query}", {"project": "nope"}, format="json", **extra)

    assert (response.status_code, response["Content-Type"]) == (status, content_type)
    assert response.content.startswith(start)


def test_rendering_the_data_itself_gives_the_bytes_rendering_its_native_form_gives():
    """`run_mutation` renders a write's data without `to_native` when nothing is stored."""
    from api.inputs import JsonRenderer
    from api.mutations import to_native

    data = {
        "at": datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC),
        "cost": Decimal("1.250000"),
        "steps": ("a", "ü", "\ud800"),
        "nested": {"n": 1, "f": 0.1, "none": None, "flag": True},
        3: "int key",
    }

    assert JsonRenderer().render(data) == JsonRenderer().render(to_native(data))
