"""A real Leasehold server in a subprocess (`manage.py serve`), for the toolkit's end-to-end tests.

It runs on its own SQLite file under a temporary LEASEHOLD_DATA_DIR, or,
with `on_suite_database=True` when the suite runs with a PostgreSQL
DATABASE_URL, on a fresh database of its own on that server (created at
start, dropped at stop). LEASEHOLD_MIN_LEASE_SECONDS=1 allows a 3-second lease
(renewed every second). Its output, including gunicorn's access log, goes to
`log_path`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 90
# Variables of the agent side that must not leak from the developer's shell into a test.
AGENT_VARIABLES = (
    "LEASEHOLD_CONFIG",
    "LEASEHOLD_STATE",
    "LEASEHOLD_URL",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_PROJECT",
    "LEASEHOLD_TRACE",
    "LEASEHOLD_RUN",
    "LEASEHOLD_ATTEMPT_TOKEN",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_env(data_dir: Path, database_url: str | None = None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL" and name not in AGENT_VARIABLES}
    if database_url:
        env["DATABASE_URL"] = database_url
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.base",
        LEASEHOLD_DEBUG="1",
        LEASEHOLD_DATA_DIR=str(data_dir),
        LEASEHOLD_MIN_LEASE_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def agent_env(home: Path, *, trace: bool = True) -> dict[str, str]:
    """The environment of a `leasehold` process whose config and state live under `home`."""
    env = {name: value for name, value in os.environ.items() if name not in AGENT_VARIABLES}
    env["LEASEHOLD_CONFIG"] = str(home / "config" / "config.json")
    if trace:
        env["LEASEHOLD_TRACE"] = str(home / "trace.jsonl")
    env.pop("DATABASE_URL", None)
    return env


def state_files(env: dict[str, str]) -> list[Path]:
    """The attempts' state files under the config directory of `env` (`<config dir>/attempts/<agent>/<task>.json`)."""
    return sorted((Path(env["LEASEHOLD_CONFIG"]).parent / "attempts").glob("*/*.json"))


def leasehold(
    *args: str, env: dict[str, str], timeout: float = 60, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run the `leasehold` console script (as `python -m agent`), this checkout's, wherever `cwd` is."""
    # Outside REPO, `-m agent` would import whatever checkout the interpreter has installed.
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))}
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def read_trace(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _postgres(admin_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(statement)


class LiveServer:
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        on_suite_database: bool = False,
        same_database_as: LiveServer | None = None,
    ) -> None:
        """`on_suite_database`: PostgreSQL when the suite runs on it; `same_database_as`: that server's database."""
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        suite_database = os.environ.get("DATABASE_URL", "")
        wanted = on_suite_database or (same_database_as is not None and same_database_as.postgres_admin_url is not None)
        on_postgres = wanted and suite_database.startswith(("postgres://", "postgresql://"))
        self.postgres_admin_url: str | None = suite_database if on_postgres else None
        self.owns_database = same_database_as is None
        self.database_name: str | None = (
            same_database_as.database_name
            if same_database_as is not None
            else f"leasehold_live_{os.getpid()}_{self.port}"
            if self.postgres_admin_url
            else None
        )
        database_url = (
            f"{self.postgres_admin_url.rsplit('/', 1)[0]}/{self.database_name}" if self.postgres_admin_url else None
        )
        self.env = server_env(data_dir, database_url)
        self.log_path = data_dir / f"server-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def database(self) -> str:
        return "postgresql" if self.postgres_admin_url else "sqlite"

    def start(self) -> LiveServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.postgres_admin_url and self.owns_database:
            _postgres(self.postgres_admin_url, f'CREATE DATABASE "{self.database_name}"')
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--no-cluster", "--port", str(self.port), "--workers", "1"],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/v1/projects/", timeout=2).status_code == 401:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not answer in {START_TIMEOUT_SECONDS} s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.postgres_admin_url and self.owns_database:
            _postgres(self.postgres_admin_url, f'DROP DATABASE IF EXISTS "{self.database_name}" WITH (FORCE)')

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def create_agent(self, handle: str, *, project: str) -> str:
        """The new agent's token: the last line of create_agent's output."""
        return self.manage("create_agent", handle, "--kind", "script", "--project", project).strip().splitlines()[-1]

    def force_release(self, key: str) -> None:
        """An admin's force-release (revocation), through the service the admin action calls."""
        self.manage(
            "shell",
            "-c",
            "from ledger.models import Task; from ledger.actors import SYSTEM; "
            "from leases.services import task_force_release; "
            f"task_force_release(task=Task.objects.get(key={key!r}), actor=SYSTEM, reason='test')",
        )

    def access_log(self, path_prefix: str, *, method: str | None = None) -> list[tuple[str, str, int]]:
        """(method, path, status) of the access-log lines whose path starts with `path_prefix`."""
        pattern = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" (?P<status>[0-9]{3})')
        lines = []
        for match in pattern.finditer(self.log_path.read_text(errors="replace")):
            if match["path"].startswith(path_prefix) and method in (None, match["method"]):
                lines.append((match["method"], match["path"], int(match["status"])))
        return lines
