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


# --- the schema states what the API enforces ---------------------------------------------

HOLDER_OPERATIONS = ["renew", "notes", "git", "finish", "release"]


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _component(schema, ref: str) -> dict[str, Any]:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _request_components(schema) -> dict[str, dict[str, Any]]:
    """Every component a request body names, and the variants of a `oneOf` one."""
    found = {}
    for _, _, operation in _operations(schema):
        body = operation.get("requestBody")
        if body is None:
            continue
        ref = body["content"]["application/json"]["schema"]["$ref"]
        component = _component(schema, ref)
        for variant in [item["$ref"] for item in component.get("oneOf", [])] or [ref]:
            found[variant.rsplit("/", 1)[1]] = _component(schema, variant)
    return found


def _accepts(schema, node: dict[str, Any], value: Any) -> bool:
    try:
        jsonschema.validate(value, _json_schema(node, schema["components"]["schemas"]))
    except jsonschema.ValidationError:
        return False
    return True


def _request_body(schema, method: str, path: str) -> dict[str, Any]:
    return schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


def test_every_request_body_refuses_fields_it_does_not_name(schema):
    components = _request_components(schema)
    assert {"TaskCreateInput", "PatchedTaskUpdateInput", "AttemptFinishFailedInput", "AttemptGitInput"} <= set(
        components
    )
    for name, component in components.items():
        assert component["additionalProperties"] is False, name
        assert component["properties"], name


def test_a_body_that_must_hold_a_field_is_required(schema):
    required = {
        path.rsplit("/", 2)[-2] if "{" in path else path: operation["requestBody"].get("required", False)
        for method, path, operation in _operations(schema)
        if "requestBody" in operation and method == "post" and "attempts" in path
    }
    assert required == {"renew": False, "notes": True, "git": True, "finish": True, "release": False}
    assert schema["paths"]["/api/v1/tasks/{key}/"]["patch"]["requestBody"]["required"] is True


def _string_schemas(node: Any, components: dict[str, Any], where: str):
    if isinstance(node, dict):
        if "$ref" in node or "oneOf" in node or "allOf" in node:
            return
        if node.get("type") == "string":
            yield where, node
        for key in ("properties",):
            for name, child in node.get(key, {}).items():
                yield from _string_schemas(child, components, f"{where}.{name}")
        if "items" in node:
            yield from _string_schemas(node["items"], components, f"{where}[]")


def test_every_text_a_request_sends_states_its_format(schema):
    components = schema["components"]["schemas"]
    strings = [
        item
        for name, component in _request_components(schema).items()
        for item in _string_schemas(component, components, name)
    ]
    for _, _, operation in _operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter["in"] != "path":
                strings.extend(_string_schemas(parameter["schema"], components, parameter["name"]))
    assert len(strings) > 30
    for where, node in strings:
        assert "pattern" in node or "enum" in node, where


def test_the_text_patterns_say_what_drf_refuses():
    from drf_spectacular.utils import extend_schema  # noqa: F401  (the app registry is ready)
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from rest_framework import serializers

    from api.schema import NON_BLANK_TEXT_PATTERN, PYTHON_WHITESPACE, TEXT_PATTERN

    whitespace = re.compile(f"[{PYTHON_WHITESPACE}]")
    assert {c for c in map(chr, range(0x10000)) if whitespace.fullmatch(c)} == {
        c for c in map(chr, range(0x110000)) if c.isspace()
    }

    def accepted(field: serializers.CharField, text: str) -> bool:
        try:
            field.run_validation(text)
        except serializers.ValidationError:
            return False
        return True

    @settings(max_examples=300, deadline=None)
    @given(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
        | st.sampled_from([" \x1c\u3000", "\x00a", "a\x00", "\n", " a "])
    )
    def agree(text):
        assert accepted(serializers.CharField(), text) == bool(re.search(NON_BLANK_TEXT_PATTERN, text)), repr(text)
        assert accepted(serializers.CharField(allow_blank=True), text) == bool(re.search(TEXT_PATTERN, text)), repr(
            text
        )
        assert accepted(serializers.CharField(trim_whitespace=False), text) == bool(
            text and re.search(TEXT_PATTERN, text)
        ), repr(text)

    agree()


def test_the_branch_pattern_is_the_branch_rule(schema):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from core.errors import InvalidBranchName
    from leases.branches import validate_branch_name
    from tests.leases.test_branches import ACCEPTED, REFUSED

    for path in ("/api/v1/tasks/{key}/claim/", "/api/v1/attempts/{attempt_id}/git/"):
        branch = _component(schema, _request_body(schema, "post", path)["$ref"])["properties"]["branch"]
        for name in ACCEPTED:
            assert _accepts(schema, branch, name), name
        for name, rule in REFUSED:
            assert not _accepts(schema, branch, name), (name, rule)

    def refused(name: str) -> bool:
        try:
            validate_branch_name(name)
        except InvalidBranchName:
            return True
        return False

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(branch["pattern"], fullmatch=True) | st.text(alphabet="fix/ab.-1Z_", max_size=12))
    def agree(name):
        assert refused(name) != _accepts(schema, branch, name), name

    agree()


def test_holder_calls_require_the_token_and_epoch_the_claim_answered(schema, client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    for action in HOLDER_OPERATIONS:
        parameters = schema["paths"][f"/api/v1/attempts/{{attempt_id}}/{action}/"]["post"]["parameters"]
        headers = {p["name"]: p for p in parameters if p["in"] == "header"}
        assert headers["X-Lease-Token"]["required"] is True
        assert headers["X-Lease-Epoch"]["required"] is True
        assert _accepts(schema, headers["X-Lease-Token"]["schema"], claim["lease_token"])
        assert not _accepts(schema, headers["X-Lease-Token"]["schema"], claim["lease_token"] + "=")
        assert _accepts(schema, headers["X-Lease-Epoch"]["schema"], claim["epoch"])
        assert headers["X-Lease-Epoch"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
        key = headers["Idempotency-Key"]["schema"]
        assert _accepts(schema, key, "~" * 128)
        assert not _accepts(schema, key, "~" * 129)
        assert not _accepts(schema, key, "a b")


# Bodies each operation's schema accepts or refuses, sent to the API: it refuses (400) exactly
# those the schema refuses. Holder calls go with the claim's own headers.
AGREEMENT = [
    ("tasks_create", {"project": "web", "title": "Write it"}),
    ("tasks_create", {"project": "web", "title": "  "}),
    ("tasks_create", {"project": "web", "title": "Nul \x00"}),
    ("tasks_create", {"project": "web", "title": "Labels", "labels": [" "]}),
    ("tasks_create", {"project": "web", "title": "Labels", "labels": ["ok"], "status": "ready"}),
    ("tasks_create", {"project": "web", "title": "Status", "status": "done"}),
    ("tasks_create", {"project": "web", "title": "Unknown", "owner": "me"}),
    ("tasks_create", {"project": "web", "title": "Blockers", "blocked_by": ["web-1"]}),
    ("tasks_claim", {"branch": "feature/x", "base_commit": "0" * 40, "lease_seconds": 60}),
    ("tasks_claim", {"branch": "feature/X"}),
    ("tasks_claim", {"branch": "feature/v1.lock"}),
    ("tasks_claim", {"branch": "feature/" + "a" * 93}),
    ("tasks_claim", {"base_commit": "A" * 40}),
    ("tasks_claim", {"environment": "db-1", "environment_kind": "database"}),
    ("tasks_claim", {"lease_seconds": 0}),
    ("attempts_renew", {}),
    ("attempts_renew", {"lease_seconds": 120}),
    ("attempts_renew", {"seconds": 120}),
    ("attempts_notes_create", {"kind": "checkpoint", "content": "   "}),
    ("attempts_notes_create", {"kind": "checkpoint", "content": "x" * 8001}),
    ("attempts_notes_create", {"kind": "checkpoint", "content": "ok", "next_steps": ["s"] * 21}),
    ("attempts_notes_create", {"kind": "checkpoint", "content": "ok", "next_steps": ["s" * 501]}),
    ("attempts_notes_create", {"kind": "checkpoint", "content": " kept as sent ", "next_steps": [""]}),
    ("attempts_git", {}),
    ("attempts_git", {"branch": "fix/web-1"}),
    ("attempts_git", {"base_commit": "f" * 39}),
    ("attempts_release", {"reason": "x" * 501}),
    ("attempts_finish", {"outcome": "failed"}),
    ("attempts_finish", {"outcome": "handoff", "failure_reason_code": "timeout"}),
    ("attempts_finish", {"outcome": "done", "interruption_reason_code": "handoff"}),
    ("attempts_finish", {"outcome": "done", "next_steps": ["s"] * 21}),
    ("attempts_finish", {"outcome": "failed", "failure_reason_code": "timeout", "result_summary": ""}),
    ("attempts_release", {}),
]


def test_the_api_refuses_exactly_the_bodies_the_schema_refuses(schema, client, task, project):
    from tests.factories import TaskFactory

    operations = {operation["operationId"]: (method, path) for method, path, operation in _operations(schema)}
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    for operation_id, body in AGREEMENT:
        method, path = operations[operation_id]
        headers = {}
        if "attempt_id" in path:
            url = attempt_url(claim, path.rsplit("/", 2)[-2])
            headers = holder(claim)
        elif "{key}" in path:
            url = path.replace("{key}", TaskFactory(project=project, status="ready").key)
        else:
            url = path
        expected = _accepts(schema, _request_body(schema, method, path), body)
        response = getattr(client, method)(url, body, format="json", **headers)
        assert (response.status_code != 400) == expected, (operation_id, body, response.status_code, response.content)


def test_finish_is_one_body_shape_per_outcome(schema):
    finish = _component(schema, _request_body(schema, "post", "/api/v1/attempts/{attempt_id}/finish/")["$ref"])
    mapping = {outcome: ref.rsplit("/", 1)[1] for outcome, ref in finish["discriminator"]["mapping"].items()}
    assert finish["discriminator"]["propertyName"] == "outcome"
    assert mapping == {
        "done": "AttemptFinishCompletedInput",
        "review": "AttemptFinishCompletedInput",
        "failed": "AttemptFinishFailedInput",
        "handoff": "AttemptFinishHandoffInput",
        "approved": "AttemptFinishDecisionInput",
        "changes_requested": "AttemptFinishDecisionInput",
        "blocked": "AttemptFinishDecisionInput",
    }
    components = schema["components"]["schemas"]
    assert "failure_reason_code" in components["AttemptFinishFailedInput"]["required"]
    assert "interruption_reason_code" in components["AttemptFinishHandoffInput"]["required"]
    assert not {"failure_reason_code", "interruption_reason_code"} & set(
        components["AttemptFinishCompletedInput"]["properties"]
    )


def test_rules_openapi_cannot_state_are_in_the_descriptions(schema):
    update = schema["paths"]["/api/v1/tasks/{key}/"]["patch"]["description"]
    for rule in ("If-Match", "expected_version", "X-Attempt-Id", "attempt_id", "blocked_reason"):
        assert rule in update, rule
    assert "blocked_reason" in schema["paths"]["/api/v1/tasks/"]["post"]["description"]


def _resolve_pointer(schema, node: dict[str, Any], pointer: str) -> dict[str, Any]:
    for part in pointer.strip("/").split("/"):
        while "$ref" in node or "allOf" in node:
            node = _component(schema, node["$ref"]) if "$ref" in node else node["allOf"][0]
        node = node["properties"][part]
    return node


def test_links_lead_from_a_created_task_to_its_claim_and_from_a_claim_to_the_holder_calls(schema):
    operations = {operation["operationId"]: operation for _, _, operation in _operations(schema)}
    created = operations["tasks_create"]["responses"]["201"]["links"]
    assert created["ClaimTask"] == {"operationId": "tasks_claim", "parameters": {"path.key": "$response.body#/key"}}
    holder_targets = {f"attempts_{action}" for action in ("renew", "git", "finish", "release")} | {
        "attempts_notes_create"
    }
    for source in ("tasks_claim", "claims_next"):
        links = operations[source]["responses"]["201"]["links"]
        holder_links = [link for link in links.values() if link["operationId"] in holder_targets]
        assert {link["operationId"] for link in holder_links} == holder_targets
        for link in holder_links:
            assert link["parameters"] == {
                "path.attempt_id": "$response.body#/attempt/id",
                "header.X-Lease-Token": "$response.body#/lease_token",
                "header.X-Lease-Epoch": "$response.body#/epoch",
            }
    # Every link names parameters its target takes, from fields its response has.
    for source_id, operation in operations.items():
        for response in operation["responses"].values():
            for name, link in response.get("links", {}).items():
                target = operations[link["operationId"]]
                taken = {f"{p['in']}.{p['name']}" for p in target.get("parameters", [])}
                body = response["content"]["application/json"]["schema"]
                for parameter, expression in link["parameters"].items():
                    assert parameter in taken, (source_id, name, parameter)
                    assert _resolve_pointer(schema, body, expression.removeprefix("$response.body#")), (
                        name,
                        expression,
                    )
