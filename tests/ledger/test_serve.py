"""README command 1's server: `manage.py serve` on a fresh SQLite data dir serves the admin."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_runs_web_and_cluster_on_fresh_sqlite_and_stops_both(tmp_path):
    port = free_port()
    data_dir = tmp_path / "var"  # created by the server, under a umask that would leave it readable
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(data_dir), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: os.umask(0o022),
    )
    lines: list[str] = []

    def read_output() -> None:
        for line in server.stdout or []:
            lines.append(line)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        status = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=15) as response:
                    status = response.status
                    page = response.read().decode()
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert server.poll() is None, "".join(lines)
                time.sleep(0.3)
        assert status == 200
        assert "Leasehold" in page
        assert (data_dir / "leasehold.sqlite3").exists()
        # Nothing under the data directory is readable by others: database, WAL, static files, keys (issue 27).
        readable = subprocess.run(["find", str(data_dir), "-perm", "/044"], capture_output=True, text=True)
        assert readable.stdout == "", readable.stdout[:2000]
        assert any((data_dir / "static").rglob("*.gz"))  # the compressed copies were checked too
        # The scheduler runs beside the web server (it may come up a little later).
        while time.monotonic() < deadline and not any("Q Cluster" in line and "running" in line for line in lines):
            time.sleep(0.2)
        assert any("Q Cluster" in line and "running" in line for line in lines), "".join(lines)
        # In WAL mode (kept in the database header). Not read from the WAL file's presence: SQLite removes that
        # file whenever the last connection closes, and the sweep checkpoints it (core.sqlite_wal). Last, as
        # this connection makes files of the test's own umask under the data directory.
        with contextlib.closing(sqlite3.connect(data_dir / "leasehold.sqlite3")) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        reader.join(timeout=10)
    assert server.returncode == 0, "".join(lines)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--workers", "0"),
        ("--threads", "0"),
        ("--head-timeout", "0"),
        ("--body-timeout", "0"),
        ("--socket-timeout", "-1"),
    ],
)
def test_serve_refuses_bad_worker_options_before_touching_anything(option, value):
    with pytest.raises(CommandError, match=option):
        call_command("serve", option, value)


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, read from /proc (Linux)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    if int(child) not in found:
                        found.add(int(child))
                        pending.append(int(child))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _start_serve(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(tmp_path), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    log = (tmp_path / "serve.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--workers", "1", "--threads", "2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait_until_serving(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert server.poll() is None, log.read_text(errors="replace")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                assert response.status == 200
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)


def test_serve_killed_with_sigkill_takes_its_children_with_it_and_frees_the_port(tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    server = _start_serve(tmp_path, port)
    children: set[int] = set()
    try:
        _wait_until_serving(server, port, log)
        deadline = time.monotonic() + 60
        while "Q Cluster" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.2)  # the cluster is up too, with its own processes
        children = _descendants(server.pid)
        assert len(children) >= 4, children  # gunicorn and its worker, the cluster and its processes
        server.kill()
        server.wait(timeout=10)
        killed_at = time.monotonic()
        while (not _port_is_free(port) or any(_alive(pid) for pid in children)) and time.monotonic() < killed_at + 5:
            time.sleep(0.1)
        assert _port_is_free(port), log.read_text(errors="replace")[-3000:]
        assert not [pid for pid in children if _alive(pid)], log.read_text(errors="replace")[-3000:]

        again = _start_serve(tmp_path, port)
        try:
            _wait_until_serving(again, port, log)
        finally:
            again.send_signal(signal.SIGTERM)
            again.wait(timeout=60)
        assert again.returncode == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if server.poll() is None:
            server.kill()
        for pid in children | _processes_serving(tmp_path):  # without the fix they outlive serve: leave none
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _processes_serving(data_dir: Path) -> set[int]:
    """The processes started for this data directory (what a failed test must not leave behind)."""
    marker = f"LEASEHOLD_DATA_DIR={data_dir}".encode()
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.add(int(environ.parent.name))
    return found - {os.getpid()}
