"""Real `manage.py serve` processes for tests, on a database of their own: SQLite in a temp dir, or, when the
tests run on PostgreSQL (DATABASE_URL), a fresh PostgreSQL database that is dropped afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.ledger.test_serve import free_port

ROOT = Path(__file__).resolve().parents[1]


def _postgres_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


@contextmanager
def server_database(data_dir: Path, name: str) -> Iterator[dict[str, str]]:
    """The environment of a server (and its management commands) on a new, empty database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_") and k != "DATABASE_URL"}
    env.update({"LEASEHOLD_DATA_DIR": str(data_dir), "LEASEHOLD_DEBUG": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.base"
    url = _postgres_url()
    if url is None:
        yield env
        return
    import psycopg

    database = f"{name}_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
        admin.execute(f'CREATE DATABASE "{database}"')
    env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + database
    try:
        yield env
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(env: dict[str, str], log: Path, *, workers: int = 1, threads: int = 2) -> Iterator[Served]:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "serve",
                "--no-cluster",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--threads",
                str(threads),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = Served(process, port, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, served.output()
            try:
                with urllib.request.urlopen(f"{served.url}/admin/login/", timeout=5) as response:  # noqa: S310 - our own server on loopback
                    assert response.status == 200
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, served.output()
                time.sleep(0.3)
        yield served
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        if process.poll() is None:
            process.kill()
            process.wait()
