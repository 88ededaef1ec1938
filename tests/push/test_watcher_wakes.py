"""The change watcher sleeps while nothing happens (push/waiting.py; issue 34: 1,000 idle runner slots):
SQLite's poll sleeps on the database's writes (`_Writes`), a commit from any process waking it at once;
PostgreSQL's listener sleeps on its socket, not in psycopg's 0.1 s steps."""

from __future__ import annotations

import select
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection

import push.waiting
from ledger.actors import SYSTEM
from ledger.models import EventType
from ledger.services import event_append
from tests.factories import ProjectFactory
from tests.push.watching import calls_while_quiet, listening_watcher

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def _wal_database(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=wal")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    return db


@linux
def test_a_commit_from_another_process_ends_the_sleep_and_quiet_lets_it_run_out(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    db = _wal_database(path)
    writes = push.waiting._Writes(path)
    try:
        assert writes.watching
        started = time.monotonic()
        assert writes.wait(0.3) is False
        assert time.monotonic() - started >= 0.29
        script = f"import sqlite3; d = sqlite3.connect({str(path)!r}); d.execute('INSERT INTO t VALUES (1)')"
        script += "; d.commit()"
        writer = subprocess.Popen([sys.executable, "-c", script])
        try:
            assert writes.wait(30.0) is True
        finally:
            writer.wait()
        assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)
    finally:
        writes.close()
        db.close()


@linux
def test_writes_to_other_files_of_the_directory_do_not_end_the_sleep(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    db = _wal_database(path)
    writes = push.waiting._Writes(path)
    stop = threading.Event()

    def scribble() -> None:
        with open(tmp_path / "server.log", "a") as log:
            while not stop.wait(0.02):
                log.write("a line\n")
                log.flush()

    scribbler = threading.Thread(target=scribble)
    scribbler.start()
    try:
        started = time.monotonic()
        assert writes.wait(0.5) is False
        assert time.monotonic() - started >= 0.49
    finally:
        stop.set()
        scribbler.join()
        writes.close()
        db.close()


def test_without_a_database_file_it_sleeps_its_timeout(tmp_path: Path) -> None:
    writes = push.waiting._Writes(":memory:")
    assert not writes.watching
    started = time.monotonic()
    assert writes.wait(0.1) is False
    assert time.monotonic() - started >= 0.09


@linux
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "sqlite", reason="the poll is SQLite's")
def test_a_quiet_database_lets_the_poll_sleep_and_a_commit_is_heard_at_once(monkeypatch):
    """Twenty looks a second were a quarter of the idle fleet's cost. With nothing committed, the poll looks
    about every `QUIET_POLL_SECONDS`; a commit is still heard within a few looks."""
    looks: list[float] = []
    real = push.waiting._data_version
    monkeypatch.setattr(push.waiting, "_data_version", lambda: looks.append(time.monotonic()) or real())
    project = ProjectFactory()
    with listening_watcher(project) as heard:
        # settle: the writes of the set-up are looked at
        quiet = calls_while_quiet(looks, settle=0.3, window=1.0)
        assert quiet <= 6  # about four (QUIET_POLL_SECONDS); ticking every POLL_SECONDS made twenty
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
        assert heard.wait(5.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN is PostgreSQL's")
def test_the_listener_sleeps_on_its_socket_and_hears_a_commit_at_once(monkeypatch):
    sleeps: list[float] = []

    def counted(*args):
        sleeps.append(time.monotonic())
        return select.select(*args)

    monkeypatch.setattr(push.waiting, "select", SimpleNamespace(select=counted))
    project = ProjectFactory()
    with listening_watcher(project) as heard:
        quiet = calls_while_quiet(sleeps, settle=0.2, window=1.5)
        assert 1 <= quiet <= 3  # about one a second (LISTEN_SECONDS); psycopg's steps were 15
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
        assert heard.wait(5.0)
