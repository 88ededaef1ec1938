"""Backups are private files and restores keep the database's guards (issue 27, L5 and L6).

L6: a backup holds password hashes, session keys and webhook secrets; it is
0600 whatever the umask, and its `DEST.partial` is created with
`O_EXCL|O_NOFOLLOW` so a planted symlink is refused, not followed.
L5: `restore` refuses a backup without the append-only triggers, or with a
trigger the migrations do not create.
"""

from __future__ import annotations

import io
import os
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from operations import backup
from tests.operations.test_backup import _base_env
from tests.served import manage

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A freshly migrated SQLite database, made by `manage.py migrate` in a process of its own."""
    data_dir = tmp_path_factory.mktemp("migrated")
    manage(_base_env(LEASEHOLD_DATA_DIR=str(data_dir)), "migrate", "--verbosity", "0")
    return data_dir / "leasehold.sqlite3"


@pytest.fixture
def loose_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_backup_is_private_whatever_the_umask(tmp_path, loose_umask):
    dest = tmp_path / "copy.backup"
    call_command("backup", str(dest), stdout=io.StringIO())
    assert _mode(dest) == 0o600
    assert not (tmp_path / "copy.backup.partial").exists()


def test_the_scheduled_backup_directory_is_private(tmp_path, loose_umask, migrated):
    made, _ = backup.backup_rotate(
        database={"NAME": str(migrated)},
        vendor="sqlite",
        server_major=0,
        directory=tmp_path / "backups",
        keep=2,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert (_mode(tmp_path / "backups"), _mode(made)) == (0o700, 0o600)


def test_a_symlink_planted_as_the_partial_file_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    dest = tmp_path / "copy.backup"
    partial = tmp_path / "copy.backup.partial"
    partial.symlink_to(victim)
    with pytest.raises(CommandError, match=r"copy\.backup\.partial exists .* never followed"):
        call_command("backup", str(dest), stdout=io.StringIO())
    assert victim.read_text() == "precious"
    assert partial.is_symlink()
    assert not dest.exists()
    dangling = tmp_path / "other.backup.partial"
    dangling.symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(CommandError, match="never followed"):
        call_command("backup", str(tmp_path / "other.backup"), stdout=io.StringIO())
    assert not (tmp_path / "created-through-the-link").exists()


def test_a_symlink_as_the_destination_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "copy.backup").symlink_to(victim)
    with pytest.raises(CommandError, match="exists; a backup never overwrites"):
        call_command("backup", str(tmp_path / "copy.backup"), stdout=io.StringIO())
    assert victim.read_text() == "precious"


# --- restore: the triggers (SQLite) ---------------------------------------------------------


def _copy_of(migrated: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    backup.backup_sqlite(source=migrated, dest=copy)
    return copy


def _restore(source: Path, tmp_path: Path) -> None:
    call_command("restore", str(source), "--data-dir", str(tmp_path / "restored"), stdout=io.StringIO())


def test_the_expected_triggers_are_those_the_migrations_create(migrated):
    with sqlite3.connect(migrated) as db:
        names = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert names == set(backup.SQLITE_TRIGGERS)
    assert backup.trigger_problems(migrated) == []


def test_restore_accepts_a_sound_backup_and_makes_it_private(migrated, tmp_path, loose_umask):
    _restore(_copy_of(migrated, tmp_path, "good.sqlite3"), tmp_path)
    restored = tmp_path / "restored" / "leasehold.sqlite3"
    assert backup.trigger_problems(restored) == []
    assert (_mode(restored), _mode(tmp_path / "restored")) == (0o600, 0o700)


@pytest.mark.parametrize("dropped", ["ledger_event_no_update", "ledger_event_no_delete", "ledger_event_no_replace"])
def test_restore_refuses_a_backup_without_an_append_only_trigger(migrated, tmp_path, dropped):
    copy = _copy_of(migrated, tmp_path, "stripped.sqlite3")
    with sqlite3.connect(copy) as db:
        db.execute(f"DROP TRIGGER {dropped}")
    with pytest.raises(CommandError, match=rf"trigger {dropped} on ledger_event is missing"):
        _restore(copy, tmp_path)
    assert not (tmp_path / "restored").exists()


def test_restore_refuses_a_foreign_trigger_and_a_defused_one(migrated, tmp_path):
    copy = _copy_of(migrated, tmp_path, "foreign.sqlite3")
    with sqlite3.connect(copy) as db:
        db.execute("CREATE TRIGGER audit_tap AFTER INSERT ON ledger_event BEGIN SELECT 1; END")
    with pytest.raises(CommandError, match="foreign trigger audit_tap on ledger_event"):
        _restore(copy, tmp_path)
    defused = _copy_of(migrated, tmp_path, "defused.sqlite3")
    with sqlite3.connect(defused) as db:
        db.execute("DROP TRIGGER ledger_event_no_update")
        db.execute("CREATE TRIGGER ledger_event_no_update BEFORE UPDATE ON ledger_event BEGIN SELECT 1; END")
    with pytest.raises(CommandError, match="ledger_event_no_update is not the append-only trigger"):
        _restore(defused, tmp_path)
    assert not (tmp_path / "restored").exists()
