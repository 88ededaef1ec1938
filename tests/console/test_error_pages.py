"""Issue 32: the console's 403, 404 and 500 pages are styled pages of the admin, with its navigation and
the request id the logs carry (`api.request_log`: the `X-Request-Id` header and the `request_id` field);
under /api/ the same errors stay JSON envelopes."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.console.conftest import make_staff

pytestmark = pytest.mark.django_db


def assert_styled_with_request_id(response, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    request_id = response["X-Request-Id"]
    assert request_id
    assert f'<code class="lh-request-id">{request_id}</code>' in body
    assert 'id="site-name"' in body, "the admin's header"
    assert 'href="/admin/"' in body, "a way back to the dashboard"
    return body


def test_a_missing_console_page_is_a_styled_404_with_the_request_id(ops_client):
    response = ops_client.get("/admin/no-such-page/")
    body = assert_styled_with_request_id(response, 404)
    assert "Page not found" in body
    assert 'id="user-tools"' in body, "the signed-in user's tools"


def test_a_404_outside_the_admin_is_styled_too_for_a_visitor(client):
    body = assert_styled_with_request_id(client.get("/no-such-page"), 404)
    assert "Page not found" in body


def test_a_client_sent_request_id_is_the_one_shown(client):
    response = client.get("/no-such-page", headers={"X-Request-Id": "trace-abc.123"})
    assert '<code class="lh-request-id">trace-abc.123</code>' in response.content.decode()


@pytest.mark.urls("tests.console.error_urls")
def test_a_view_that_raises_is_a_styled_500_with_the_request_id(ledger_admin, settings):
    settings.DEBUG = False
    client = Client(raise_request_exception=False)
    client.force_login(ledger_admin)
    response = client.get("/admin/broken/")
    body = assert_styled_with_request_id(response, 500)
    assert "Server error" in body
    assert "a bug in a console view" not in body, "no exception text shown"
    assert "Traceback" not in body


def test_a_forbidden_console_page_is_a_styled_403(client, django_user_model):
    staff = make_staff(django_user_model, "nobody", None)
    client.force_login(staff)
    response = client.get("/admin/ledger/task/")
    body = assert_styled_with_request_id(response, 403)
    assert "Permission denied" in body


def test_api_errors_stay_json_envelopes(client):
    response = client.get("/api/v1/no-such-endpoint/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


def test_the_error_page_keeps_its_request_id_when_the_styled_page_cannot_be_drawn(client, monkeypatch):
    from django.contrib import admin

    def broken_context(request):
        raise RuntimeError("the database is gone")

    monkeypatch.setattr(admin.site, "each_context", broken_context)
    response = client.get("/no-such-page")
    assert response.status_code == 404
    assert f'<code class="lh-request-id">{response["X-Request-Id"]}</code>' in response.content.decode()
