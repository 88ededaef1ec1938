"""`GET /tasks/{key}/text/`: read a task's long texts in ranges, the parts the work context cut (SPEC §15.4)."""

from __future__ import annotations

import pytest

from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def text_of(client, key: str, **query) -> dict:
    response = client.get(f"/api/v1/tasks/{key}/text/", query)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def ten(project):
    return TaskFactory(project=project, description="0123456789", acceptance_criteria="tests pass")


def test_the_default_range_is_the_first_4000_characters_of_the_description(client, project):
    task = TaskFactory(project=project, description="d" * 5000)
    body = text_of(client, task.key)
    assert body == {
        "key": task.key,
        "field": "description",
        "offset": 0,
        "length": 5000,
        "text": "d" * 4000,
        "more": True,
    }


@pytest.mark.parametrize(
    ("offset", "limit", "text", "more"),
    [
        (0, 10, "0123456789", False),
        (0, 9, "012345678", True),
        (9, 1, "9", False),
        (9, 5, "9", False),
        (10, 5, "", False),
        (11, 5, "", False),
        (2**31 - 2, 16000, "", False),
    ],
)
def test_ranges_at_the_edges(client, ten, offset, limit, text, more):
    body = text_of(client, ten.key, offset=offset, limit=limit)
    assert (body["offset"], body["length"], body["text"], body["more"]) == (offset, 10, text, more)


def test_the_acceptance_criteria_read_the_same_way(client, ten):
    body = text_of(client, ten.key, field="acceptance_criteria", offset=6)
    assert (body["field"], body["text"], body["length"], body["more"]) == ("acceptance_criteria", "pass", 10, False)


def test_an_empty_text_is_an_empty_range(client, project):
    task = TaskFactory(project=project)
    assert text_of(client, task.key) == {
        "key": task.key,
        "field": "description",
        "offset": 0,
        "length": 0,
        "text": "",
        "more": False,
    }


def test_offsets_count_characters_not_bytes(client, project):
    task = TaskFactory(project=project, description="é" * 3 + "ü𝄞z")
    body = text_of(client, task.key, offset=3, limit=2)
    assert (body["text"], body["length"], body["more"]) == ("ü𝄞", 6, True)


def test_paging_through_a_megabyte_rebuilds_it_exactly(client, project):
    description = "".join(chr(0x41 + n % 26) + ("é" if n % 7 == 0 else "") for n in range(600_000))
    task = TaskFactory(project=project, description=description)
    parts, offset, more = [], 0, True
    while more:
        body = text_of(client, task.key, offset=offset, limit=16000)
        parts.append(body["text"])
        offset += len(body["text"])
        more = body["more"]
    assert "".join(parts) == description
    assert len(parts) == -(-len(description) // 16000)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"field": "title"}, "field"),
        ({"offset": -1}, "offset"),
        ({"offset": "x"}, "offset"),
        ({"limit": 0}, "limit"),
        ({"limit": 16001}, "limit"),
        ({"limit": "all"}, "limit"),
    ],
)
def test_a_bad_field_offset_or_limit_is_a_validation_error(client, ten, query, field):
    error = assert_error(client.get(f"/api/v1/tasks/{ten.key}/text/", query), 400, "VALIDATION_ERROR")
    assert list(error["details"]["fields"]) == [field]


def test_the_largest_limit_is_accepted(client, ten):
    assert text_of(client, ten.key, limit=16000)["text"] == "0123456789"


def test_a_task_of_another_project_is_not_found(ten):
    outsider = client_for(AgentFactory(projects=[ProjectFactory(slug="elsewhere")]))
    assert_error(outsider.get(f"/api/v1/tasks/{ten.key}/text/"), 404, "NOT_FOUND")
    assert_error(outsider.get("/api/v1/tasks/WEB-999/text/"), 404, "NOT_FOUND")


def test_a_text_range_costs_two_queries(client, ten, django_assert_num_queries):
    client.get("/api/v1/projects/")
    with django_assert_num_queries(2):  # authentication, the range
        assert client.get(f"/api/v1/tasks/{ten.key}/text/").status_code == 200
