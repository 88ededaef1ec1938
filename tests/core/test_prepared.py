"""Statements compiled once (`core.prepared`): they run what the queryset would, or refuse to prepare."""

from __future__ import annotations

import datetime as dt
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import F, signals
from django.db.transaction import TransactionManagementError

from core.prepared import (
    SAMPLE_INT,
    SAMPLE_TIME,
    NotPreparable,
    Prepared,
    PreparedUpdate,
    insert,
    run_select,
    update_row,
)
from leases.models import Attempt, IdempotencyRecord, Note
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project, Task, TaskStatus
from ledger.services import event_append
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

PROJECTS = ({"project": Project(pk=SAMPLE_INT[0])}, {"project": Project(pk=SAMPLE_INT[1])})


def _tasks_of(project: Project, now: dt.datetime):
    return Task.objects.filter(project=project, created_at__lte=now).order_by("number")


def _samples_with_time():
    return tuple({**PROJECTS[index], "now": SAMPLE_TIME[index]} for index in (0, 1))


def test_rows_are_what_values_list_answers_for_other_values(clock):
    first, second = ProjectFactory(), ProjectFactory()
    for project in (first, first, second):
        TaskFactory(project=project, labels=["x"])
    prepared = Prepared(
        lambda project, now: _tasks_of(project, now).values_list("key", "labels", "created_at", "status"),
        samples=_samples_with_time(),
    )
    for project in (first, second):
        for now in (clock.now(), clock.now() - timedelta(days=1)):
            expected = list(_tasks_of(project, now).values_list("key", "labels", "created_at", "status"))
            assert prepared.rows(project=project, now=now) == expected
    assert len(prepared.rows(project=first, now=clock.now())) == 2


def test_objects_come_whole_with_their_related_rows(clock):
    task = TaskFactory(priority=3)
    prepared = Prepared(
        lambda project, now: _tasks_of(project, now).select_related("project").only("key", "project__slug"),
        samples=_samples_with_time(),
    )
    (found,) = prepared.objects(project=task.project, now=clock.now())
    assert (found.pk, found.key, found.project.slug) == (task.pk, task.key, task.project.slug)
    assert "project" in found._state.fields_cache
    assert found.priority == 3  # deferred: loads on first access, as the queryset's would


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        # a value that changes the statement's shape
        (lambda project, now: Task.objects.filter(pk__in=range(project.pk % 10)), "shape"),
        # a value computed from a sample
        (lambda project, now: Task.objects.filter(project=project, created_at__lte=now + timedelta(1)), "exactly one"),
        # a sample that goes in nowhere
        (lambda project, now: Task.objects.filter(project=project), "go into no parameter"),
    ],
)
def test_what_cannot_be_prepared_is_refused_before_it_runs(build, problem):
    prepared = Prepared(build, samples=_samples_with_time())
    with pytest.raises(NotPreparable, match=problem):
        prepared.rows(project=Project(pk=1), now=SAMPLE_TIME[0])


def test_none_is_refused_where_the_orm_would_have_written_is_null():
    prepared = Prepared(lambda project: Task.objects.filter(project=project), samples=PROJECTS)
    with pytest.raises(NotPreparable, match="None"):
        prepared.rows(project=None)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no FOR UPDATE")
@pytest.mark.django_db(transaction=True)
def test_a_locking_read_outside_a_transaction_is_refused_like_the_orm():
    prepared = Prepared(lambda project: Task.objects.select_for_update().filter(project=project), samples=PROJECTS)
    with pytest.raises(TransactionManagementError):
        prepared.rows(project=Project(pk=1))
    with transaction.atomic():
        assert prepared.rows(project=Project(pk=1)) == []


def test_an_update_sets_what_the_queryset_update_would(clock):
    task = TaskFactory()
    bump = PreparedUpdate(
        lambda task_id, at: (Task.objects.filter(pk=task_id), {"updated_at": at, "epoch": F("epoch") + 2}),
        samples=(
            {"task_id": SAMPLE_INT[0], "at": SAMPLE_TIME[0]},
            {"task_id": SAMPLE_INT[1], "at": SAMPLE_TIME[1]},
        ),
    )
    later = clock.now() + timedelta(hours=1)
    assert bump.run(task_id=task.pk, at=later) == 1
    assert bump.run(task_id=task.pk + 10_000, at=later) == 0
    task.refresh_from_db()
    assert (task.epoch, task.updated_at) == (2, later)


def test_insert_writes_the_row_create_would(clock):
    task = TaskFactory()
    now = clock.now()
    made = Event.objects.create(
        type=EventType.TASK_UPDATED, task=task, project=task.project, payload={"a": [1, "é"]}, created_at=now
    )
    inserted = insert(
        Event(type=EventType.TASK_UPDATED, task=task, project=task.project, payload={"a": [1, "é"]}, created_at=now)
    )
    assert inserted.pk == made.pk + 1
    assert not inserted._state.adding
    columns = [field.attname for field in Event._meta.concrete_fields if field.name != "id"]
    assert Event.objects.values(*columns).get(pk=inserted.pk) == Event.objects.values(*columns).get(pk=made.pk)


def test_the_models_written_without_signals_have_no_receivers():
    """`insert` and `update_row` send no signals; nothing listens to the models they write."""
    for model in (Event, Attempt, IdempotencyRecord, Note, Task):
        for signal in (signals.pre_save, signals.post_save):
            assert not signal.has_listeners(model), (model, signal)


def test_update_row_is_a_compare_and_set(clock):
    task = TaskFactory(status=TaskStatus.READY)
    task.title = "renamed"
    assert update_row(task, ["title"], status=TaskStatus.DONE) == 0
    assert Task.objects.get(pk=task.pk).title != "renamed"
    assert update_row(task, ["title"], status=TaskStatus.READY) == 1
    stored = Task.objects.get(pk=task.pk)
    assert (stored.title, stored.version) == ("renamed", task.version)


def test_the_audit_log_still_gets_one_row_per_event(clock):
    task = TaskFactory()
    before = Event.objects.count()
    event = event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=clock.now(), task=task, payload={"k": 1})
    assert Event.objects.count() == before + 1
    stored = Event.objects.get(pk=event.pk)
    assert (stored.project_id, stored.task_id, stored.payload) == (task.project_id, task.pk, {"k": 1})


def _prepared_on_this_connection(sql: str) -> int:
    """How many statements of this session PostgreSQL holds prepared with `sql`'s text (psycopg's `$n` form)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    table = Task._meta.db_table
    return sum(1 for text in prepared if table in text and text.replace("$1", "%s").replace("$2", "%s") == sql)


_TASK_BY_NUMBER: Prepared[Task] = Prepared(
    lambda project, number: Task.objects.filter(project=project, number=number),
    samples=(
        {"project": Project(pk=SAMPLE_INT[0]), "number": SAMPLE_INT[0] + 1},
        {"project": Project(pk=SAMPLE_INT[1]), "number": SAMPLE_INT[1] + 1},
    ),
)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite prepares every statement itself")
def test_a_hot_statement_is_prepared_on_the_server_after_the_threshold():
    task = TaskFactory()
    sql = _TASK_BY_NUMBER.compiled().sql
    threshold = connection.connection.prepare_threshold
    assert threshold == 2
    assert _prepared_on_this_connection(sql) == 0
    for _ in range(threshold + 1):
        assert [found.pk for found in _TASK_BY_NUMBER.objects(project=task.project, number=task.number)] == [task.pk]
    assert _prepared_on_this_connection(sql) == 1
    # The ORM's own statements bind on the client and are never prepared, however often they run.
    for _ in range(threshold + 2):
        assert Task.objects.filter(project=task.project, number=task.number).count() == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%COUNT(*)%"])
        assert cursor.fetchone() == (0,)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite prepares every statement itself")
def test_with_prepared_statements_off_nothing_is_prepared(monkeypatch):
    """Behind a transaction pooler (`LEASEHOLD_DB_TRANSACTION_POOLING`) the setting is off: Django's cursor."""
    monkeypatch.setitem(connection.settings_dict, "PREPARED_STATEMENTS", False)
    task = TaskFactory()
    sql = _TASK_BY_NUMBER.compiled().sql
    for _ in range(connection.connection.prepare_threshold + 3):
        assert [found.pk for found in _TASK_BY_NUMBER.objects(project=task.project, number=task.number)] == [task.pk]
    assert _prepared_on_this_connection(sql) == 0


_BY_TITLE_AND_STATUS: Prepared[Task] = Prepared(
    lambda project: (
        Task.objects.filter(
            project=project, status=TaskStatus.READY, title__in=["it's 100% done", "%s and %%s", "plain"]
        )
        .exclude(number=99)
        .order_by("number")
        .values_list("title")
    ),
    samples=PROJECTS,
)


@pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite re-plans a statement whose bound value picks a partial index"
)
def test_on_sqlite_the_constants_are_written_into_the_statement_and_it_answers_as_the_orm():
    """Issue 34: with `status = ?` SQLite prepared the claim's read again at every binding (a partial index
    depends on that value). Constant text and integers become literals, quotes and percent signs included;
    the samples stay parameters."""
    project = ProjectFactory()
    for title in ("it's 100% done", "%s and %%s", "plain", "other"):
        TaskFactory(project=project, title=title, status=TaskStatus.READY)
    TaskFactory(project=project, title="plain", status=TaskStatus.OPEN)
    compiled = _BY_TITLE_AND_STATUS.compiled()
    assert "'ready'" in compiled.sql
    assert "99" in compiled.sql
    assert [name for _, name, _ in compiled.slots] == ["project"]
    assert len(compiled.params) == 1
    expected = list(
        Task.objects.filter(
            project=project, status=TaskStatus.READY, title__in=["it's 100% done", "%s and %%s", "plain"]
        )
        .exclude(number=99)
        .order_by("number")
        .values_list("title")
    )
    assert len(expected) == 3
    assert _BY_TITLE_AND_STATUS.rows(project=project) == expected


@pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite re-plans a statement whose bound value picks a partial index"
)
def test_claim_nexts_emptiness_read_names_its_status_in_its_text():
    from leases.services.claim_next import _ANY_CANDIDATE, _FIRST_CANDIDATE

    for statement in (*_ANY_CANDIDATE.values(), *_FIRST_CANDIDATE.values()):
        sql = statement.compiled().sql
        assert "\"status\" = 'ready'" in sql
        assert "%s" in sql  # the project, the agent and the time stay parameters


def test_with_columns_reads_a_value_from_the_enclosing_statement_and_binds_the_rest(clock):
    """`with_columns`: a statement embedded in another, one of its values taken from the enclosing
    statement's column (as authentication's statement embeds claim-next's read), the others still bound."""
    first, second = ProjectFactory(), ProjectFactory()
    TaskFactory(project=first)
    prepared = Prepared(lambda project, now: _tasks_of(project, now).values_list("pk"), samples=_samples_with_time())
    inner = prepared.compiled().with_columns({"project": "p.id"})
    assert "p.id" in inner.sql
    sql = f"SELECT p.id, EXISTS ({inner.sql}) FROM {Project._meta.db_table} p ORDER BY p.id"
    answers = {
        clock.now(): {first.pk: True, second.pk: False},
        clock.now() - timedelta(days=1): {first.pk: False, second.pk: False},
    }
    for now, expected in answers.items():
        found = {pk: bool(exists) for pk, exists in run_select(sql, inner.params_for({"now": now}))}
        assert found == expected
    with pytest.raises(NotPreparable, match="go into no parameter"):
        prepared.compiled().with_columns({"agent": "a.id"})
