"""`manage.py backup` while the server writes, `restore`, and the daily rotating backup (SPEC §17)."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test import override_settings
from django_q.models import Schedule

from bench.data import bulk_ready_tasks
from ledger.actors import SYSTEM
from ledger.models import Project, Task
from ledger.services import task_create
from operations.backup import BackupRefused, backup_postgres, backup_scheduled, integrity_problems
from operations.schedules import BACKUP_SCHEDULE, ensure_schedules
from tests.factories import ProjectFactory
from tests.served import manage

ROOT = Path(__file__).resolve().parents[2]


def _base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.base", "PYTHONDONTWRITEBYTECODE": "1", **extra})
    env["LEASEHOLD_SECRET_KEY"] = "test-secret-key-for-the-restored-copy-0123456789"
    return env


class _Writer(threading.Thread):
    """Creates tasks through the service on its own connection until stopped, counting them."""

    def __init__(self, project: Project) -> None:
        super().__init__(daemon=True)
        self.project_pk = project.pk
        self.written = 0
        self.stop = threading.Event()
        self.started_writing = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            project = Project.objects.get(pk=self.project_pk)
            while not self.stop.is_set():
                task_create(project=project, title=f"written during the backup {self.written}", actor=SYSTEM)
                self.written += 1
                self.started_writing.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.started_writing.set()
        finally:
            connections.close_all()


def _backup_while_writing(dest: Path) -> tuple[int, int, int]:
    """Back up with a writer running; (tasks before, tasks written during the backup, tasks after)."""
    project = cast(Project, ProjectFactory(slug="busy"))
    bulk_ready_tasks(project, 20_000, body_bytes=400)
    writer = _Writer(project)
    writer.start()
    assert writer.started_writing.wait(30)
    before = writer.written
    call_command("backup", str(dest), stdout=io.StringIO())
    during = writer.written - before
    writer.stop.set()
    writer.join(30)
    assert writer.error is None, writer.error
    return before, during, Task.objects.filter(project=project).count()


@pytest.mark.django_db(transaction=True)
def test_a_backup_taken_while_the_server_writes_is_sound_and_migrates(tmp_path):
    dest = tmp_path / "copy.backup"
    _, during, after = _backup_while_writing(dest)
    assert during > 0  # the writer went on while the backup ran
    if connection.vendor == "sqlite":
        assert integrity_problems(dest) == []
        with sqlite3.connect(dest) as copy:
            copied = copy.execute("SELECT count(*) FROM ledger_task").fetchone()[0]
        assert 20_000 < copied <= after
        data_dir = tmp_path / "restored"
        call_command("restore", str(dest), "--data-dir", str(data_dir), stdout=io.StringIO())
        manage(_base_env(LEASEHOLD_DATA_DIR=str(data_dir)), "migrate", "--check")
    else:
        import psycopg

        listed = subprocess.run(["pg_restore", "--list", str(dest)], capture_output=True, text=True, check=True)
        assert "TABLE DATA public ledger_event" in listed.stdout
        base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        database = f"restored_{os.getpid()}"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
            admin.execute(f'CREATE DATABASE "{database}"')
        try:
            subprocess.run(["pg_restore", "--dbname", f"{base}/{database}", str(dest)], check=True)
            with psycopg.connect(f"{base}/{database}") as restored:
                copied = restored.execute("SELECT count(*) FROM ledger_task").fetchone()[0]
            assert 20_000 < copied <= after
            manage(_base_env(DATABASE_URL=f"{base}/{database}", LEASEHOLD_DATA_DIR=str(tmp_path)), "migrate", "--check")
        finally:
            with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.mark.django_db
def test_a_backup_never_overwrites_and_needs_a_directory_it_can_write(tmp_path):
    existing = tmp_path / "there"
    existing.write_text("keep me")
    with pytest.raises(CommandError, match="exists; a backup never overwrites"):
        call_command("backup", str(existing))
    assert existing.read_text() == "keep me"
    with pytest.raises(CommandError, match="is not a directory"):
        call_command("backup", str(tmp_path / "missing" / "copy"))
    with pytest.raises(CommandError, match="is not a directory"):
        call_command("backup", str(existing / "copy"))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere: the check above (a file as the directory) still ran
        with pytest.raises(CommandError, match="is not writable"):
            call_command("backup", str(locked / "copy"))
    assert list(locked.iterdir()) == []


def _fake_programs(directory: Path, version: str) -> None:
    directory.mkdir()
    for name in ("pg_dump", "pg_restore"):
        script = directory / name
        script.write_text(f"#!/bin/sh\necho '{name} (PostgreSQL) {version}'\n")
        script.chmod(0o755)


DATABASE: dict[str, Any] = {"NAME": "leasehold", "HOST": "127.0.0.1", "PORT": "5432", "USER": "postgres"}


def test_a_missing_pg_dump_is_a_clear_error(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(BackupRefused, match="pg_dump is not on PATH; install the PostgreSQL client programs"):
        backup_postgres(database=DATABASE, server_major=15, dest=tmp_path / "dump")
    assert not (tmp_path / "dump").exists()


def test_a_pg_dump_older_than_the_server_is_a_clear_error(tmp_path, monkeypatch):
    _fake_programs(tmp_path / "bin", "13.4")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(BackupRefused, match=r"pg_dump \(PostgreSQL\) 13.4 cannot dump a PostgreSQL 15 server"):
        backup_postgres(database=DATABASE, server_major=15, dest=tmp_path / "dump")


@pytest.mark.django_db
def test_the_scheduled_backup_keeps_the_newest_n_and_only_touches_its_own_files(tmp_path):
    ProjectFactory(slug="kept")
    other = tmp_path / "notes.txt"
    other.write_text("not a backup")
    start = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    made = [backup_scheduled(directory=tmp_path, keep=2, now=start + timedelta(days=day))[0] for day in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([made[1].name, made[2].name, "notes.txt"])
    assert made[2].name.startswith("leasehold-20261203T030000Z")


@pytest.mark.django_db
def test_the_daily_backup_is_scheduled_exactly_while_a_backup_directory_is_set(tmp_path):
    name, func = BACKUP_SCHEDULE
    with override_settings(LEASEHOLD_BACKUP_DIR=str(tmp_path)):
        ensure_schedules()
        ensure_schedules()
        assert list(Schedule.objects.filter(name=name).values_list("func", "schedule_type")) == [(func, Schedule.DAILY)]
    ensure_schedules()
    assert not Schedule.objects.filter(name=name).exists()


@pytest.mark.django_db
def test_the_backup_job_writes_into_the_backup_directory(tmp_path):
    from operations.jobs import backup_job

    with override_settings(LEASEHOLD_BACKUP_DIR=str(tmp_path), LEASEHOLD_BACKUP_KEEP=3):
        result = backup_job()
    assert Path(result["backup"]).parent == tmp_path
    assert Path(result["backup"]).stat().st_size > 0


def test_restore_refuses_a_non_empty_target_a_damaged_source_and_a_foreign_database(tmp_path):
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    target = tmp_path / "target"
    with pytest.raises(CommandError, match="not a Leasehold database"):
        call_command("restore", str(foreign), "--data-dir", str(target))
    with pytest.raises(CommandError, match="integrity_check"):
        call_command("restore", str(damaged), "--data-dir", str(target))
    target.mkdir()
    (target / "leasehold.sqlite3").write_text("something")
    good = tmp_path / "good.sqlite3"
    with sqlite3.connect(good) as db:
        for table in ("django_migrations", "ledger_event", "ledger_task"):
            db.execute(f"CREATE TABLE {table} (x)")
    with pytest.raises(CommandError, match="is not empty"):
        call_command("restore", str(good), "--data-dir", str(target))
    assert (target / "leasehold.sqlite3").read_text() == "something"
