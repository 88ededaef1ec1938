"""A bad export file is refused with the line and what is wrong, and nothing is written (SPEC §17)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import Agent, Event, Project, Task
from operations.transfer.export import project_export
from tests.operations.transfer.scenario import build_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def exported(admin_user) -> list[str]:
    build_project(admin_user)
    out = io.StringIO()
    project_export(project=Project.objects.get(slug="src"), out=out)
    return out.getvalue().splitlines(keepends=True)


def _refused(tmp_path, lines: list[str], match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(lines))
    projects, tasks, events, agents = (
        Project.objects.count(),
        Task.objects.count(),
        Event.objects.count(),
        Agent.objects.count(),
    )
    with pytest.raises(CommandError, match=match):
        call_command("import_project", str(path), "--as", "copy", "--key-prefix", "CPY", stdout=io.StringIO())
    assert (Project.objects.count(), Task.objects.count(), Event.objects.count(), Agent.objects.count()) == (
        projects,
        tasks,
        events,
        agents,
    )
    assert not Project.objects.filter(slug="copy").exists()


def test_a_truncated_file_is_refused(tmp_path, exported):
    _refused(tmp_path, exported[: len(exported) // 2], r"line \d+: the file ends without its end row: it is truncated")


def test_a_cut_off_last_line_is_malformed_json(tmp_path, exported):
    _refused(tmp_path, [*exported[:-1], exported[-1][:10]], rf"line {len(exported)}: not valid JSON")


def test_a_row_that_references_a_row_not_yet_seen_is_refused(tmp_path, exported):
    first_task = next(i for i, line in enumerate(exported) if '"type":"task"' in line)
    first_attempt = next(i for i, line in enumerate(exported) if '"type":"attempt"' in line)
    reordered = [*exported[:first_task], exported[first_attempt], *exported[first_task:first_attempt]]
    reordered += exported[first_attempt + 1 :]
    _refused(tmp_path, reordered, rf"line {first_task + 1}: task references task \d+, which no earlier row defines")


def test_a_reference_to_a_missing_row_names_it(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if '"type":"dependency"' in line)
    row = json.loads(exported[index])
    row["blocked_by"] = 999
    exported[index] = json.dumps(row) + "\n"
    _refused(tmp_path, exported, rf"line {index + 1}: blocked_by references task 999, which no earlier row defines")


def test_a_newer_format_is_refused(tmp_path, exported):
    _refused(tmp_path, ['{"type":"header","format":2}\n', *exported[1:]], r"line 1: format 2 is newer")


def test_a_row_of_an_unknown_type_is_refused(tmp_path, exported):
    _refused(
        tmp_path, [*exported[:3], '{"type":"spaceship"}\n', *exported[3:]], r"line 4: unknown row type 'spaceship'"
    )


def test_an_unknown_field_is_refused(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if '"type":"note"' in line)
    row = json.loads(exported[index])
    row["colour"] = "blue"
    exported[index] = json.dumps(row) + "\n"
    _refused(tmp_path, exported, rf"line {index + 1}: unknown field\(s\) of a note row: colour")


def test_counts_that_do_not_match_the_end_row_are_refused(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if '"type":"comment"' in line)
    _refused(tmp_path, exported[:index] + exported[index + 1 :], r"comment: 1 declared, 0 read")


def test_a_bad_value_names_its_field(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if '"type":"task"' in line)
    row = json.loads(exported[index])
    row["created_at"] = "yesterday"
    exported[index] = json.dumps(row) + "\n"
    _refused(tmp_path, exported, rf"line {index + 1}: created_at")


def test_an_existing_slug_and_a_taken_key_prefix_are_refused(tmp_path, exported):
    path = tmp_path / "src.jsonl"
    path.write_text("".join(exported))
    with pytest.raises(CommandError, match="slug 'src' exists"):
        call_command("import_project", str(path), stdout=io.StringIO())
    with pytest.raises(CommandError, match="key prefix 'SRC' is taken"):
        call_command("import_project", str(path), "--as", "copy", stdout=io.StringIO())
    assert not Project.objects.filter(slug="copy").exists()


def test_an_empty_file_and_a_file_that_is_not_an_export_are_refused(tmp_path):
    _refused(tmp_path, [], r"line 1: the file is empty")
    _refused(tmp_path, ['{"type":"task"}\n'], r"line 1: the first row must be the header row")


def test_a_section_out_of_order_is_refused(tmp_path, exported):
    first_note = next(i for i, line in enumerate(exported) if '"type":"note"' in line)
    first_task = next(i for i, line in enumerate(exported) if '"type":"task"' in line)
    moved = [*exported[:first_note], *exported[first_note + 1 :]]
    moved.insert(first_note + 1, exported[first_task])  # a task row again, after the notes
    _refused(tmp_path, moved, rf"line {first_note + 2}: a task row after \w+ rows: the file is out of order")


def test_a_file_without_a_project_row_is_refused_and_touches_no_other_delivery(tmp_path, exported):
    _refused(tmp_path, [exported[0], '{"type":"end","counts":{}}\n'], r"line 2: the end row before any project row")


def test_two_rows_with_one_id_are_refused(tmp_path, exported):
    index = next(i for i, line in enumerate(exported) if '"type":"note"' in line)
    exported.insert(index + 1, exported[index])
    _refused(tmp_path, exported, r"two note rows with id \d+")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("priority", 2**70, "64 bits"),
        ("budget_cost_usd", "abc", "expected a decimal"),
        ("budget_cost_usd", "NaN", "finite"),
        ("budget_cost_usd", "Infinity", "finite"),
    ],
)
def test_a_number_no_column_can_hold_names_its_field(tmp_path, exported, field, value, says):
    index = next(i for i, line in enumerate(exported) if '"type":"task"' in line)
    row = json.loads(exported[index])
    assert field in row
    row[field] = value
    exported[index] = json.dumps(row) + "\n"
    _refused(tmp_path, exported, rf"line {index + 1}: {field}.*{says}")
