"""README command 1's server: `manage.py serve` on a fresh SQLite data dir serves the admin."""

from __future__ import annotations

import os
import signal
import socket
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(tmp_path), "LEASEHOLD_DEBUG": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
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
        assert (tmp_path / "leasehold.sqlite3").exists()
        # The scheduler runs beside the web server (it may come up a little later).
        while time.monotonic() < deadline and not any("Q Cluster" in line and "running" in line for line in lines):
            time.sleep(0.2)
        assert any("Q Cluster" in line and "running" in line for line in lines), "".join(lines)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        reader.join(timeout=10)
    assert server.returncode == 0, "".join(lines)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--workers", "0"), ("--threads", "0"), ("--head-timeout", "0"), ("--socket-timeout", "-1")],
)
def test_serve_refuses_bad_worker_options_before_touching_anything(option, value):
    with pytest.raises(CommandError, match=option):
        call_command("serve", option, value)
