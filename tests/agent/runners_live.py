"""Runner daemons against the live server (`tests.agent.live`), for the runner's end-to-end tests (SPEC §23.1).

A runner is made on the server with the `runners` room's service (through `manage.py shell`), its token written
to a 0600 file, its config to `runner.toml`; `leasehold --json runner` then runs as a real process with real git
clones. Its events (one JSON object per line on stdout) are read from a file. The command every slot runs is
`work.py`: it commits a file in its worktree, records itself (task, pid, argv, which variables it got) in
`$WORK_LOG`, then sleeps `$WORK_SECONDS` (default 0.2) — SIGTERM ends it at once, as Python's default does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.client import LeaseholdClient
from tests.agent.gitrepos import IDENTITY, make_repos
from tests.agent.live import AGENT_VARIABLES, REPO, LiveServer, free_port

WORK = r"""
import json, os, subprocess, sys, time
from pathlib import Path
task = os.environ["LEASEHOLD_TASK"]
record = {
    "task": task,
    "pid": os.getpid(),
    "argv": sys.argv[1:],
    "label": os.environ.get("LEASEHOLD_LABEL", ""),
    "attempt": int(os.environ["LEASEHOLD_ATTEMPT_ID"]),
    "leasehold_variables": sorted(name for name in os.environ if name.startswith("LEASEHOLD_")),
    "tokens_in_env": [name for name, value in os.environ.items() if value.startswith(("lh_", "lhr_"))],
    "cwd": os.getcwd(),
}
Path(f"work-{task}.txt").write_text(f"{task} by attempt {record['attempt']}\n")  # a successor commits too
subprocess.run(["git", "add", f"work-{task}.txt"], check=True)
subprocess.run(["git", "commit", "-qm", f"work on {task}"], check=True)
with open(os.environ["WORK_LOG"], "a") as log:  # after the commit: a test that kills it now leaves no git lock
    log.write(json.dumps(record) + "\n")
time.sleep(float(os.environ.get("WORK_SECONDS", "0.2")))
"""

MAKE_RUNNER = """
import json
from ledger.actors import SYSTEM
from ledger.models import Project
from runners.services import runner_create
runner, token = runner_create(
    name={name!r}, projects=list(Project.objects.filter(slug__in={projects!r})), slots={slots}, labels={labels!r},
    actor=SYSTEM,
)
print("token", token)
"""

ATTEMPTS = """
import json
from leases.models import Attempt
rows = Attempt.objects.filter(task__project__slug={slug!r}).order_by("id")
print(json.dumps([
    {{"id": a.id, "task": a.task.key, "status": a.status, "agent": a.agent.handle, "kind": a.kind,
      "reason": a.interruption_reason_code or None}}
    for a in rows
]))
"""


def make_project(server: LiveServer, slug: str) -> None:
    server.manage("create_project", slug, "--name", f"Runner test {slug}")


def planner(server: LiveServer, *slugs: str) -> LeaseholdClient:
    """A client of an agent that sees these projects (to make tasks and read them)."""
    projects = [arg for slug in slugs for arg in ("--project", slug)]
    made = server.manage("create_agent", f"planner-{slugs[0]}", "--kind", "script", *projects)
    return LeaseholdClient(server.url, made.strip().splitlines()[-1])


def make_runner(server: LiveServer, name: str, *, projects: list[str], slots: int, labels: Sequence[str] = ()) -> str:
    made = server.manage(
        "shell", "-c", MAKE_RUNNER.format(name=name, projects=projects, slots=slots, labels=list(labels))
    )
    return next(line.split()[1] for line in made.splitlines() if line.startswith("token "))


def attempts(server: LiveServer, slug: str) -> list[dict[str, Any]]:
    return json.loads(server.manage("shell", "-c", ATTEMPTS.format(slug=slug)).strip().splitlines()[-1])


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent's wait counts as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(check: Callable[[], Any], *, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")


@dataclass
class RunnerProcess:
    name: str
    home: Path
    config: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    logs: list[Path] = field(default_factory=list)

    @property
    def work_log(self) -> Path:
        return Path(self.env["WORK_LOG"])

    def start(self, **env: str) -> RunnerProcess:
        self.starts += 1
        events = self.home / f"events-{self.starts}.jsonl"
        stderr = self.home / f"stderr-{self.starts}.txt"
        self.logs += [events, stderr]
        with open(events, "wb") as out, open(stderr, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agent", "--json", "runner", "--config", str(self.config)],
                env={**self.env, **env},
                cwd=self.home,
                stdout=out,
                stderr=err,
            )
        return self

    def events(self, kind: str | None = None, *, run: int | None = None) -> list[dict[str, Any]]:
        found = []
        for index in [run] if run else range(1, self.starts + 1):
            path = self.home / f"events-{index}.jsonl"
            if path.exists():
                found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [event for event in found if kind is None or event["event"] == kind]

    def work(self) -> list[dict[str, Any]]:
        if not self.work_log.exists():
            return []
        return [json.loads(line) for line in self.work_log.read_text().splitlines() if line.strip()]

    def stderr(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs if path.name.startswith("stderr"))

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a drain) and the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def runner_setup(
    server: LiveServer,
    root: Path,
    name: str,
    *,
    projects: dict[str, Path],
    slots: int,
    labels: Sequence[str] = (),
    top: str = "",
    project_options: str = "",
    work_seconds: float = 0.2,
    server_url: str | None = None,
    work_script: str = WORK,
    token: str | None = None,
    wait_seconds: int = 5,
) -> RunnerProcess:
    """A runner on the server and its config on disk (not started); `projects` maps slug → clone.

    `server_url`: what the config names as the server (a proxy in front of it, say); `work_script`: the command;
    `token`: the token of a runner made already (else it is made here)."""
    home = root / name
    home.mkdir(parents=True)
    token = token or make_runner(server, name, projects=list(projects), slots=slots, labels=labels)
    token_file = home / "runner.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    work = home / "work.py"
    work.write_text(work_script)
    tables = "\n".join(
        textwrap.dedent(
            f"""
            [projects.{slug}]
            repository = "{clone}"
            command = ["{sys.executable}", "{work}", "default", "{{task}}"]
            commands = {{ docs = ["{sys.executable}", "{work}", "docs", "{{task}}", "{{context_file}}"] }}
            {project_options}
            """
        )
        for slug, clone in projects.items()
    )
    config = home / "runner.toml"
    config.write_text(
        f'server = "{server_url or server.url}"\ntoken_file = "{token_file}"\nstate_dir = "{home / "state"}"\n'
        f"wait_seconds = {wait_seconds}\n{top}\n{tables}"
    )
    env = {name: value for name, value in os.environ.items() if name not in AGENT_VARIABLES and "DATABASE" not in name}
    env = {name: value for name, value in env.items() if not name.startswith("GIT_")}
    env.update(IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    env["PYTHONPATH"] = str(REPO)
    env["WORK_LOG"] = str(home / "work.jsonl")
    env["WORK_SECONDS"] = str(work_seconds)
    return RunnerProcess(name=name, home=home, config=config, env=env)


def clone_for(root: Path, name: str) -> Path:
    return make_repos(root / name).clone


def state_files(runner: RunnerProcess) -> list[Path]:
    return sorted((runner.home / "state").glob("slot-*/leasehold/attempts/*/*.json"))


class TcpProxy:
    """127.0.0.1:port → the server, one thread per direction per connection; it can cut and restore the link."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def partition(self) -> None:
        """Refuse new connections (nothing listens) and drop every open one."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            dropped, self._open = self._open, set()
        for sock in dropped:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.partition()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: a partition
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    client.close()
                    upstream.close()
                    continue
                self.accepted += 1
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)


def _shell_answer(server: LiveServer, *lines: str) -> str:
    """The last line `manage.py shell -c` printed (it may print a banner first)."""
    return server.manage("shell", "-c", "\n".join(lines)).strip().splitlines()[-1]


def expire_on_the_server(server: LiveServer, attempt_id: int) -> None:
    """The expiry service, with its process's clock at the lease's end: the lease ran out, and no one slept."""
    out = _shell_answer(
        server,
        "from core.db import write_transaction",
        "from ledger import clock",
        "from leases.models import Attempt",
        "from leases.services.expiry import expire_lapsed",
        f"ends = Attempt.objects.get(pk={attempt_id}).lease_expires_at",
        "clock.freeze(ends)",
        f"print(write_transaction(lambda: expire_lapsed([{attempt_id}], now=ends))())",
    )
    assert out == "1", out
