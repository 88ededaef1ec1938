"""OpenAPI: every SPEC §8 operation documented with request, response and error schemas; served offline.

Responses of a full lifecycle are validated against the schema they claim,
so a schema-driven fuzzer (Schemathesis) finds the documented shapes.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from django.core.management import call_command

from tests.api.conftest import attempt_url, holder

pytestmark = pytest.mark.django_db

SPEC_OPERATIONS = [
    ("get", "/api/v1/projects/"),
    ("get", "/api/v1/tasks/"),
    ("post", "/api/v1/tasks/"),
    ("get", "/api/v1/tasks/{key}/"),
    ("patch", "/api/v1/tasks/{key}/"),
    ("post", "/api/v1/tasks/{key}/claim/"),
    ("post", "/api/v1/claims/next/"),
    ("get", "/api/v1/tasks/{key}/context/"),
    ("get", "/api/v1/tasks/{key}/text/"),
    ("post", "/api/v1/tasks/{key}/dependencies/"),
    ("post", "/api/v1/tasks/{key}/dependencies/remove/"),
    ("post", "/api/v1/attempts/{attempt_id}/renew/"),
    ("post", "/api/v1/attempts/{attempt_id}/notes/"),
    ("post", "/api/v1/attempts/{attempt_id}/finish/"),
    ("post", "/api/v1/attempts/{attempt_id}/release/"),
    ("get", "/api/v1/attempts/{attempt_id}/"),
    ("get", "/api/v1/changes/"),
    ("get", "/api/v1/search/"),
    ("post", "/api/v1/agents/me/heartbeat/"),
    ("get", "/api/v1/metrics/"),
]
BODY_OPERATIONS = {
    (method, path)
    for method, path in SPEC_OPERATIONS
    if method in ("post", "patch") and not path.endswith("heartbeat/")
}


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def test_the_schema_generates_without_warnings_and_validates():
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


def test_every_spec_operation_has_request_response_and_error_schemas(schema):
    for method, path in SPEC_OPERATIONS:
        operation = schema["paths"][path][method]
        responses = operation["responses"]
        success = [status for status in responses if status.startswith("2")]
        assert success, (method, path)
        for status in success:
            if status != "204":
                assert "application/json" in responses[status]["content"], (method, path, status)
        for status in ("400", "401", "404") if not path.endswith("heartbeat/") else ("400", "401"):
            ref = responses[status]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorEnvelope"), (method, path, status)
        if (method, path) in BODY_OPERATIONS:
            assert "requestBody" in operation, (method, path)
            for status in ("409", "413", "415"):
                assert status in responses, (method, path, status)
    assert set(schema["components"]["securitySchemes"]) >= {"agentToken"}
    assert schema["components"]["securitySchemes"]["agentToken"]["scheme"] == "bearer"


def test_holder_operations_document_the_lease_headers(schema):
    for action in ("renew", "notes", "finish", "release"):
        parameters = schema["paths"][f"/api/v1/attempts/{{attempt_id}}/{action}/"]["post"]["parameters"]
        headers = {p["name"]: p for p in parameters if p["in"] == "header"}
        assert headers["X-Lease-Token"]["required"] is True
        assert headers["X-Lease-Epoch"]["schema"]["type"] == "integer"
        assert "Idempotency-Key" in headers


def test_schema_and_docs_are_served_without_a_cdn(client):
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "Leasehold API"
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in html
    external = re.findall(r"""(?:src|href)=["'](https?:)?//""", html)
    assert external == []


# --- responses conform to the documented schemas -------------------------------------


def _json_schema(node: Any, components: dict[str, Any]) -> Any:
    """OpenAPI 3.0 schema → JSON Schema: resolve $ref, turn `nullable` into a null type."""
    if isinstance(node, list):
        return [_json_schema(item, components) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _json_schema(components[node["$ref"].rsplit("/", 1)[1]], components)
    converted = {key: _json_schema(value, components) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        if "enum" in converted:
            converted["enum"] = [*converted["enum"], None]
        if "type" in converted:
            converted["type"] = [converted["type"], "null"]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def _check(schema, method: str, path: str, response) -> None:
    operation = schema["paths"][path][method]
    documented = operation["responses"][str(response.status_code)]
    if response.status_code == 204:
        return
    target = _json_schema(documented["content"]["application/json"]["schema"], schema["components"]["schemas"])
    jsonschema.validate(response.json(), target, format_checker=jsonschema.FormatChecker())


def test_lifecycle_responses_match_the_schema(schema, client, other_client, task, project):
    def check(method, path, response):
        _check(schema, method, path, response)

    check("get", "/api/v1/projects/", client.get("/api/v1/projects/"))
    check("get", "/api/v1/tasks/", client.get("/api/v1/tasks/"))
    created = client.post("/api/v1/tasks/", {"project": "web", "title": "Doc it", "status": "ready"}, format="json")
    check("post", "/api/v1/tasks/", created)
    check("get", "/api/v1/tasks/{key}/", client.get(f"/api/v1/tasks/{task.key}/"))
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    check("post", "/api/v1/tasks/{key}/claim/", claim)
    check(
        "post", "/api/v1/tasks/{key}/claim/", other_client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json")
    )
    claimed = claim.json()
    update = client.patch(
        f"/api/v1/tasks/{task.key}/",
        {"priority": 2, "attempt_id": claimed["attempt"]["id"]},
        format="json",
        HTTP_IF_MATCH="1",
        **holder(claimed),
    )
    check("patch", "/api/v1/tasks/{key}/", update)
    check("get", "/api/v1/tasks/{key}/context/", client.get(f"/api/v1/tasks/{task.key}/context/"))
    check(
        "post",
        "/api/v1/attempts/{attempt_id}/renew/",
        client.post(attempt_url(claimed, "renew"), {}, format="json", **holder(claimed)),
    )
    note = client.post(
        attempt_url(claimed, "notes"), {"kind": "checkpoint", "content": "c"}, format="json", **holder(claimed)
    )
    check("post", "/api/v1/attempts/{attempt_id}/notes/", note)
    check("get", "/api/v1/attempts/{attempt_id}/", client.get(attempt_url(claimed)))
    check(
        "post",
        "/api/v1/attempts/{attempt_id}/finish/",
        client.post(attempt_url(claimed, "finish"), {"outcome": "done"}, format="json", **holder(claimed)),
    )
    nxt = client.post("/api/v1/claims/next/", {"project": "web"}, format="json")
    check("post", "/api/v1/claims/next/", nxt)
    check(
        "post",
        "/api/v1/attempts/{attempt_id}/release/",
        client.post(attempt_url(nxt.json(), "release"), {}, format="json", **holder(nxt.json())),
    )
    check("post", "/api/v1/claims/next/", client.post("/api/v1/claims/next/", {"project": "web"}, format="json"))
    check("get", "/api/v1/changes/", client.get("/api/v1/changes/"))
    check("get", "/api/v1/search/", client.get("/api/v1/search/?q=doc"))
    check("post", "/api/v1/agents/me/heartbeat/", client.post("/api/v1/agents/me/heartbeat/"))
    check("get", "/api/v1/metrics/", client.get("/api/v1/metrics/?days=2"))
    check("get", "/api/v1/tasks/{key}/", client.get("/api/v1/tasks/WEB-404/"))
