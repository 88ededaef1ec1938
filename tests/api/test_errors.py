"""One envelope for every error, with the SPEC §8 status per code; no input produces a 500."""

from __future__ import annotations

import json

import pytest
from django.db import DataError
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.test import APIClient

from api.errors import exception_handler
from api.inputs import MAX_BODY_BYTES
from core.errors import ERRORS_BY_CODE, PayloadTooLarge
from tests.api.conftest import assert_error, attempt_url, holder

pytestmark = pytest.mark.django_db

# SPEC §8, copied here as the oracle: the table, not the code, is the contract.
SPEC_STATUS = {
    "VALIDATION_ERROR": 400,
    "INVALID_BRANCH_NAME": 400,
    "INVALID_STATUS_TRANSITION": 400,
    "AUTHENTICATION_FAILED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "TASK_TAKEN": 409,
    "TASK_NOT_CLAIMABLE": 409,
    "VERSION_CONFLICT": 409,
    "ACKNOWLEDGEMENT_REQUIRED": 409,
    "IDEMPOTENCY_CONFLICT": 409,
    "ENVIRONMENT_UNAVAILABLE": 409,
    "DEPENDENCY_CYCLE": 409,
    "LEASE_EXPIRED": 409,
    "LEASE_NOT_HELD": 409,
    "STALE_EPOCH": 409,
    "INVALID_LEASE_TOKEN": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "RATE_LIMITED": 429,
    "STORAGE_BUSY": 503,
}


@pytest.mark.parametrize("code", sorted(SPEC_STATUS))
def test_each_code_gets_its_status_and_the_envelope(code):
    response = exception_handler(ERRORS_BY_CODE[code]("boom", details={"x": 1}), {})
    assert response.status_code == SPEC_STATUS[code]
    assert response.data == {
        "error": {
            "code": code,
            "message": "boom",
            "retryable": code in {"STORAGE_BUSY", "RATE_LIMITED", "ENVIRONMENT_UNAVAILABLE"},
            "details": {"x": 1},
        }
    }


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (drf.ValidationError({"title": ["required"]}), 400, "VALIDATION_ERROR"),
        (drf.ParseError("bad"), 400, "VALIDATION_ERROR"),
        (drf.NotAuthenticated(), 401, "AUTHENTICATION_FAILED"),
        (drf.AuthenticationFailed(), 401, "AUTHENTICATION_FAILED"),
        (drf.PermissionDenied(), 403, "PERMISSION_DENIED"),
        (Http404(), 404, "NOT_FOUND"),
        (drf.MethodNotAllowed("PUT"), 405, "METHOD_NOT_ALLOWED"),
        (drf.NotAcceptable(), 406, "NOT_ACCEPTABLE"),
        (drf.UnsupportedMediaType("text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE"),
        (drf.Throttled(wait=3), 429, "RATE_LIMITED"),
        (DataError("value too long"), 400, "VALIDATION_ERROR"),
        (OverflowError("int too large"), 400, "VALIDATION_ERROR"),
        (RuntimeError("a bug"), 500, "INTERNAL_ERROR"),
    ],
)
def test_drf_django_and_unknown_errors_get_the_envelope(exc, status, code):
    response = exception_handler(exc, {})
    assert response.status_code == status
    assert response.data["error"]["code"] == code
    if status == 429:
        assert response["Retry-After"] == "3"
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_validation_details_name_the_fields(client):
    error = assert_error(client.post("/api/v1/tasks/", {"title": 5}, format="json"), 400, "VALIDATION_ERROR")
    assert set(error["details"]["fields"]) == {"project"}
    assert "project" in error["message"]


def test_unknown_paths_and_methods_under_api(client):
    assert_error(client.get("/api/v1/nothing/here/"), 404, "NOT_FOUND")
    assert_error(client.get("/api/v2/tasks/"), 404, "NOT_FOUND")
    assert_error(APIClient().get("/api/v1/nothing/"), 404, "NOT_FOUND")
    missing_slash = assert_error(client.post("/api/v1/tasks", {}, format="json"), 404, "NOT_FOUND")
    assert "/api/v1/tasks/" in missing_slash["message"]
    assert_error(client.delete("/api/v1/tasks/"), 405, "METHOD_NOT_ALLOWED")
    assert_error(client.put("/api/v1/tasks/WEB-1/", {}, format="json"), 405, "METHOD_NOT_ALLOWED")
    assert_error(client.get("/api/v1/claims/next/"), 405, "METHOD_NOT_ALLOWED")


def test_a_disallowed_host_gets_the_envelope(client):
    assert_error(client.get("/api/v1/projects/", HTTP_HOST="evil.example"), 400, "VALIDATION_ERROR")


def test_unsupported_media_type(client, task):
    response = client.post(
        f"/api/v1/tasks/{task.key}/claim/", "lease_seconds=60", content_type="application/x-www-form-urlencoded"
    )
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_body_over_the_limit_is_payload_too_large(client, task):
    body = json.dumps({"title": "x", "project": "web", "description": "a" * (MAX_BODY_BYTES + 10)})
    assert_error(client.post("/api/v1/tasks/", body, content_type="application/json"), 413, "PAYLOAD_TOO_LARGE")


def test_body_longer_than_its_content_length_claims_is_still_bounded(client, task):
    """A body read by the parser is cut at the limit even if Content-Length lies low."""
    from api.inputs import JsonBodyParser

    class Stream:
        def read(self, size):
            return b"[" * size

    with pytest.raises(PayloadTooLarge):
        JsonBodyParser().parse(Stream(), "application/json", {})


MALFORMED_BODIES = [
    "{",
    "[1, 2",
    "null",
    "[]",
    '"a string"',
    "12",
    "NaN",
    '{"lease_seconds": NaN}',
    '{"lease_seconds": Infinity}',
    '{"lease_seconds": 1e999}',
    '{"lease_seconds": 99999999999999999999999999999999}',
    '{"lease_seconds": -5}',
    '{"lease_seconds": 0}',
    '{"lease_seconds": "ten"}',
    '{"lease_seconds": 1.5}',
    '{"lease_seconds": true}',
    '{"lease_seconds": [60]}',
    '{"lease_seconds": {"a": 1}}',
    '{"branch": 12}',
    '{"branch": "feature/\\u0000null"}',
    '{"branch": "\\ud800"}',
    '{"branch": "feature/ünïcödé"}',
    '{"branch": "' + "a" * 5000 + '"}',
    '{"base_commit": "zz"}',
    '{"environment_kind": "spaceship"}',
    '{"environment": "a", "environment_kind": "database"}',
    '{"environment": "not a name!"}',
    "[" * 5000 + "]" * 5000,
    '{"a": ' * 3000 + "1" + "}" * 3000,
    "\xff\xfe garbage",
    '{"lease_seconds": ' + "9" * 5000 + "}",
]


@pytest.mark.parametrize("body", MALFORMED_BODIES, ids=range(len(MALFORMED_BODIES)))
def test_malformed_claim_bodies_are_4xx(client, task, body):
    response = client.post(
        f"/api/v1/tasks/{task.key}/claim/", body.encode("utf-8", "surrogatepass"), content_type="application/json"
    )
    assert 400 <= response.status_code < 500, response.content[:300]
    assert response.json()["error"]["code"] in {"VALIDATION_ERROR", "INVALID_BRANCH_NAME", "NOT_FOUND"}


def test_claims_with_unknown_or_busy_environments(client, task):
    assert_error(
        client.post(f"/api/v1/tasks/{task.key}/claim/", {"environment": "nope"}, format="json"), 404, "NOT_FOUND"
    )
    busy = assert_error(
        client.post(f"/api/v1/tasks/{task.key}/claim/", {"environment_kind": "database"}, format="json"),
        409,
        "ENVIRONMENT_UNAVAILABLE",
    )
    assert busy["retryable"] is True


@pytest.mark.parametrize(
    "payload",
    [
        {"project": "web", "title": "x", "priority": 2**31},
        {"project": "web", "title": "x", "priority": -(2**63)},
        {"project": "web", "title": "\x00"},
        {"project": "web", "title": "ok", "description": "nul \x00 inside"},
        {"project": "web", "title": "ok", "labels": "not-a-list"},
        {"project": "web", "title": "ok", "labels": ["x" * 65]},
        {"project": "web", "title": "ok", "blocked_by": [{"key": "WEB-1"}]},
        {"project": "web", "title": "ok", "task_class": "Not A Slug"},
        {"project": "../etc", "title": "ok"},
        {"project": "web", "title": "x" * 301},
        {"project": "web", "title": ""},
        {"project": None, "title": None},
    ],
)
def test_malformed_task_creations_are_4xx(client, task, payload):
    response = client.post("/api/v1/tasks/", payload, format="json")
    assert 400 <= response.status_code < 500, response.content[:300]


def test_unicode_round_trips(client, task):
    response = client.post("/api/v1/tasks/", {"project": "web", "title": "Übersetzung 翻译 🚀"}, format="json")
    assert response.status_code == 201
    assert response.json()["title"] == "Übersetzung 翻译 🚀"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/attempts/-1/",
        "/api/v1/attempts/0/",
        "/api/v1/attempts/007/",
        "/api/v1/attempts/99999999999999999999999/",
        "/api/v1/attempts/1e3/",
        "/api/v1/tasks/web-1/",
        "/api/v1/tasks/WEB-0/",
        "/api/v1/tasks/WEB-99999999999/",
        "/api/v1/tasks/%00/",
        "/api/v1/tasks/WEB-1%00/",
        "/api/v1/tasks/%F0%9F%9A%80/",
        "/api/v1/attempts/999999999999999999/",
    ],
)
def test_odd_ids_are_not_found(client, task, path):
    assert_error(client.get(path), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_X_LEASE_TOKEN": "t"},
        {"HTTP_X_LEASE_EPOCH": "1"},
        {"HTTP_X_LEASE_TOKEN": "t", "HTTP_X_LEASE_EPOCH": "one"},
        {"HTTP_X_LEASE_TOKEN": "t", "HTTP_X_LEASE_EPOCH": "-1"},
        {"HTTP_X_LEASE_TOKEN": "t", "HTTP_X_LEASE_EPOCH": "1.0"},
        {"HTTP_X_LEASE_TOKEN": "t", "HTTP_X_LEASE_EPOCH": "99999999999999999999"},
        {"HTTP_X_LEASE_TOKEN": "t", "HTTP_X_LEASE_EPOCH": ""},
        {"HTTP_X_LEASE_TOKEN": "", "HTTP_X_LEASE_EPOCH": "1"},
        {"HTTP_X_LEASE_TOKEN": "t" * 201, "HTTP_X_LEASE_EPOCH": "1"},
    ],
)
def test_missing_or_malformed_lease_headers_are_validation_errors(client, task, headers):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    response = client.post(attempt_url(claim, "renew"), {}, format="json", **headers)
    assert_error(response, 400, "VALIDATION_ERROR")


def test_odd_lease_tokens_are_just_wrong_tokens(client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    for token in ("\x00", "ü" * 10, "' OR 1=1 --", claim["lease_token"] + " "):
        response = client.post(
            attempt_url(claim, "renew"), {}, format="json", HTTP_X_LEASE_TOKEN=token, HTTP_X_LEASE_EPOCH="1"
        )
        assert_error(response, 409, "INVALID_LEASE_TOKEN")
    assert client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)).status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        "since=-1",
        "since=abc",
        "since=99999999999999999999999",
        "limit=201",
        "limit=0",
        "project=%00",
        "project=n%C3%BC",
    ],
)
def test_malformed_change_feed_queries_are_4xx(client, query):
    response = client.get(f"/api/v1/changes/?{query}")
    assert 400 <= response.status_code < 500, response.content[:300]


@pytest.mark.parametrize("query", ["q=", "q=%00", "q=" + "x" * 201, "q=ok&limit=51", "q=ok&cursor=%FF"])
def test_malformed_searches_are_4xx(client, query):
    response = client.get(f"/api/v1/search/?{query}")
    assert 400 <= response.status_code < 500, response.content[:300]


@pytest.mark.parametrize("query", ["q=%00", "task_class=%00", "status=%00", "limit=1e3", "cursor=eyJhZnRlciI6IngifQ"])
def test_malformed_task_list_queries_are_4xx(client, query):
    response = client.get(f"/api/v1/tasks/?{query}")
    assert 400 <= response.status_code < 500, response.content[:300]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/search/?q=%ED%A0%80",
        "/api/v1/search/?q=%27%22%3B--%20%25_%5C",
        "/api/v1/search/?q=a%20%26%20%7C%20!%20(%20)%20%3A*",
        "/api/v1/tasks/?effective_status=,,,",
        "/api/v1/tasks/?q=%25%25%25_",
        "/api/v1/tasks/?status=ready&status=open",
        "/api/v1/changes/?since=0&since=5",
        "/api/v1/metrics/?days=90",
        "/api/v1/projects/?cursor=eyJhZnRlciI6IiJ9",
    ],
)
def test_odd_but_harmless_queries_are_answered(client, task, url):
    response = client.get(url)
    assert response.status_code < 500
    assert response["Content-Type"].startswith("application/json")


def test_huge_error_details_are_bounded(client, task):
    response = client.post(
        "/api/v1/tasks/", {"project": "web", "title": "ok", "labels": ["x" * 65] * 50}, format="json"
    )
    assert_error(response, 400, "VALIDATION_ERROR")
    assert len(response.content) < 8 * 1024


def test_an_error_echoing_a_lone_surrogate_still_renders(client, task):
    body = b'{"status": "\\ud800"}'
    response = client.patch(f"/api/v1/tasks/{task.key}/", body, content_type="application/json", HTTP_IF_MATCH="1")
    assert_error(response, 400, "VALIDATION_ERROR")
    assert b"\\ud800" in response.content  # escaped, since UTF-8 cannot carry it


def test_django_level_errors_under_api_get_the_envelope_and_elsewhere_html(rf):
    from api.errors import handler404, handler500

    api = handler500(rf.get("/api/v1/tasks/"))
    assert api.status_code == 500
    assert json.loads(api.content)["error"]["code"] == "INTERNAL_ERROR"
    assert json.loads(handler404(rf.get("/api/v1/x/"), Exception()).content)["error"]["code"] == "NOT_FOUND"
    assert handler500(rf.get("/admin/")).status_code == 500
    assert b"error" not in handler500(rf.get("/admin/")).content[:20]


def test_an_unexpected_drf_server_error_is_a_500_not_a_client_error():
    response = exception_handler(drf.APIException("boom"), {})
    assert response.status_code == 500
    assert response.data["error"]["code"] == "INTERNAL_ERROR"
