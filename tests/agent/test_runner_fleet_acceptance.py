"""Issue 31's "Done when" (SPEC §23), against a live server on both databases, with real git and real processes.

One fleet for the module: three runners of three slots over one project of 30 tasks (3 require `gpu`), one clone
they share, landing off:
- `gpu` (label gpu) takes the gpu tasks, then is drained from the console (`runner_drain`): it finishes what
  runs, takes nothing more, and idles;
- `prov` has an environment provider (`[providers.KIND]`, and `environment_kind` on its project so that each claim
  allocates an environment of that kind): a real PostgreSQL database per attempt on the PostgreSQL lane, a
  directory per attempt elsewhere (`tests.agent.provider_backends`). It is `kill -9`ed mid-run (its `run`
  children and commands are gone within 2 s, and `run` hands their attempts off), restarted, then crashed as a
  machine crashes (the runner and its `run` children killed at once: the leases stay live, and so do the
  sandboxes, until the restart hands the attempts off at once with `runner_restart` and tears the sandboxes down
  before any claim);
- `edge` reaches the server through a TCP proxy in the test: a short partition costs no attempt; a long one ends
  with a refused late report (STALE_EPOCH, in the runner's log and a comment on the task) and the work on the
  branch, taken over by the successor.
Every command dumps its environment, argv and `/proc/self/fd` link targets: no agent or runner token appears; its
`LEASEHOLD_ATTEMPT_TOKEN` is refused for another attempt, another task's claim, and once the attempt has ended.

Commands are held (a file per runner) only where a phase needs them running; otherwise they commit and exit 0.

Scaled down from the issue, for a 2-core CI lane:
- The issue's partitions are 20 s on 60 s leases (short) and 90 s (long). The margin `run` keeps in a partition
  is max(5 s, 10 % of the lease, its grace + 1 s) = 11 s (the runner's `run` keeps the default 10 s grace), so
  the short partition uses 45 s leases (renewals every 15 s, retried every 7.5 s after a failure): it is cut 1 s
  before one attempt's renewal is due, kept cut 3 s (until that renewal has failed, at least), and every slot's
  next try lands at least 5 s before the margin would stop its command (a 20 s cut would not fit: a slot whose
  renewal failed just as the link was cut needs it back within about 11 s).
- The long partition uses 20 s leases (the runner restarted with them), so `run` stops its command about 7 to 13 s
  after the cut instead of 49; the server's lease is then expired by the expiry service with a frozen clock
  (never by sleeping), a successor claims, and the link comes back — no 90 s wait.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.client import LeaseholdClient
from tests.agent.gitrepos import git
from tests.agent.live import LiveServer
from tests.agent.provider_backends import Backend, backend
from tests.agent.runners_live import (
    RunnerProcess,
    TcpProxy,
    alive,
    clone_for,
    expire_on_the_server,
    runner_setup,
    wait_until,
)

SLUG = "fleet31"
TASKS, GPU_TASKS, SLOTS = 30, 3, 3
ENVIRONMENTS = 8  # more than the provider runner's slots: a crash leaves its environments stale until re-claimed
SHORT_PARTITION_LEASE = 45
LONG_PARTITION_LEASE = 20
SHORT_PARTITION_SECONDS = 3.0  # at least; every slot's retry (every 7.5 s) then lands 9 s or more before the margin
# `leasehold: error: CODE` lines and tokens: an agent's `lh_…`, a runner's `lhr_…` (an attempt's is `lha_…`).
TOKEN_SHAPE = re.compile(r"\blhr?_[A-Za-z0-9_-]{16,}")

WORK = r"""
import json, os, subprocess, sys, time
from pathlib import Path
task = os.environ["LEASEHOLD_TASK"]
attempt = int(os.environ["LEASEHOLD_ATTEMPT_ID"])
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
dump = {"env": dict(os.environ), "argv": sys.argv, "fds": fds}
Path(os.environ["WORK_DUMPS"], f"{attempt}.json").write_text(json.dumps(dump))
sandbox = None
if os.environ.get("LEASEHOLD_ENV_HOST_PATH"):
    sandbox = os.path.isdir(os.environ["LEASEHOLD_ENV_HOST_PATH"])
elif os.environ.get("LEASEHOLD_ENV_DATABASE_URL"):
    import psycopg
    try:
        psycopg.connect(os.environ["LEASEHOLD_ENV_DATABASE_URL"], connect_timeout=5).close()
        sandbox = True
    except psycopg.Error:
        sandbox = False
mine = Path(f"work-{task}.txt")
inherited = mine.read_text() if mine.exists() else None
mine.write_text(f"{task} by attempt {attempt}\n")
subprocess.run(["git", "add", mine.name], check=True)
subprocess.run(["git", "commit", "-qm", f"work on {task} (attempt {attempt})"], check=True)
record = {
    "task": task, "attempt": attempt, "pid": os.getpid(), "sandbox": sandbox, "inherited": inherited,
    "environment": os.environ.get("LEASEHOLD_ENV_NAME"), "token": os.environ.get("LEASEHOLD_ATTEMPT_TOKEN", ""),
    "head": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
}
with open(os.environ["WORK_LOG"], "a") as log:
    log.write(json.dumps(record) + "\n")
hold = os.environ.get("WORK_HOLD", "")
while hold and os.path.exists(hold):
    time.sleep(0.05)
"""

ROWS = """
import json
from leases.models import Attempt
rows = Attempt.objects.filter(task__project__slug={slug!r}).order_by("id")
print(json.dumps([
    {{"id": a.id, "task": a.task.key, "status": a.status, "agent": a.agent.handle, "epoch": a.epoch,
      "reason": a.interruption_reason_code or None}}
    for a in rows
]))
"""

CONSOLE = """
from ledger.actors import SYSTEM
from runners.models import Runner
from runners.services import {service}
{service}(runner=Runner.objects.get(name={name!r}), actor=SYSTEM)
"""

SLOT_STATES = """
import json
from runners.models import RunnerSlot
print(json.dumps(sorted(RunnerSlot.objects.filter(runner__name={name!r}).values_list("state", flat=True))))
"""


@dataclass
class Fleet31:
    server: LiveServer
    api: LeaseholdClient
    keys: list[str]
    gpu_keys: list[str]
    gpu: RunnerProcess
    prov: RunnerProcess
    edge: RunnerProcess
    proxy: TcpProxy
    sandboxes: Backend
    clone: Path
    dumps: Path
    slot_tokens: set[str] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def runners(self) -> list[RunnerProcess]:
        return [self.gpu, self.prov, self.edge]

    def rows(self) -> list[dict[str, Any]]:
        return json.loads(self.server.manage("shell", "-c", ROWS.format(slug=SLUG)).strip().splitlines()[-1])

    def attempts(self, ids: set[int] | list[int]) -> dict[int, tuple[str, str | None]]:
        """(status, interruption reason) of each attempt, through the API (a `manage.py shell` takes seconds)."""
        return {i: ((seen := self.api.attempt(i))["status"], seen["interruption_reason_code"]) for i in ids}

    def console(self, service: str, runner: RunnerProcess) -> None:
        self.server.manage("shell", "-c", CONSOLE.format(service=service, name=runner.name))

    def slot_states(self, runner: RunnerProcess) -> list[str]:
        answer = self.server.manage("shell", "-c", SLOT_STATES.format(name=runner.name))
        return json.loads(answer.strip().splitlines()[-1])


def hold(runner: RunnerProcess) -> Path:
    return Path(runner.env["WORK_HOLD"])


def runner_tokens(fleet: Fleet31) -> list[str]:
    return [(runner.home / "runner.token").read_text().strip() for runner in fleet.runners]


def live_runs(runner: RunnerProcess) -> list[dict[str, Any]]:
    """The `start` events of the runner's current process whose `run` child is still alive."""
    return [event for event in runner.events("start", run=runner.starts) if alive(int(event["pid"]))]


def collect_slot_tokens(fleet: Fleet31, runner: RunnerProcess) -> None:
    """The slot agents' tokens, read from the live `run` children's environment (the runner keeps them in memory)."""
    for event in live_runs(runner):
        environ = Path(f"/proc/{event['pid']}/environ").read_bytes().split(b"\0")
        tokens = [item.split(b"=", 1)[1].decode() for item in environ if item.startswith(b"LEASEHOLD_TOKEN=")]
        assert len(tokens) == 1, event
        assert tokens[0].startswith("lh_"), event
        fleet.slot_tokens.update(tokens)


def held(runner: RunnerProcess, count: int, *, after: int = 0) -> list[dict[str, Any]]:
    """Wait until `count` commands started after the runner's first `after` records; those records."""
    records = wait_until(
        lambda: (work := runner.work()[after:]) and len(work) >= count and work,
        timeout=90,
        what=f"{count} commands of {runner.name}",
    )
    return records[:count]


def run_log(runner: RunnerProcess, attempt_id: int) -> str:
    found = list((runner.home / "state").glob(f"slot-*/logs/*-{attempt_id}.log"))
    return found[0].read_text(errors="replace") if found else ""


def attempt_token_answer(fleet: Fleet31, token: str, method: str, path: str, body: Any = None) -> tuple[int, str]:
    answer = httpx.request(
        method, f"{fleet.server.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}, json=body, timeout=30
    )
    code = (answer.json().get("error") or {}).get("code", "") if answer.content else ""
    return answer.status_code, code


def next_renewal(fleet: Fleet31, attempt_ids: list[int]) -> tuple[int, float]:
    """The attempt whose next renewal is due first, at least 2 s from now, and when (wall clock: the server's is
    this machine's). `run` renews every third of the lease after the last renewal."""
    interval = SHORT_PARTITION_LEASE // 3
    soonest: tuple[int, float] | None = None
    for attempt_id in attempt_ids:
        seen = fleet.api.attempt(attempt_id)
        due = datetime.fromisoformat(seen["last_renewed_at"] or seen["claimed_at"]).timestamp() + interval
        while due < time.time() + 2:
            due += interval
        if soonest is None or due < soonest[1]:
            soonest = (attempt_id, due)
    assert soonest is not None
    return soonest


SETUP = """
import io, json
from django.core.management import call_command
from environments.services import environment_create
from ledger.actors import SYSTEM
from ledger.models import Project
from runners.services import runner_create
call_command("create_project", {slug!r}, "--name", "Issue 31 acceptance")
said = io.StringIO()
call_command("create_agent", "planner-{slug}", "--kind", "script", "--project", {slug!r}, stdout=said)
project = Project.objects.get(slug={slug!r})
for n in range({environments}):
    environment_create(project=project, name=f"{slug}-env-{{n}}", kind={kind!r}, actor=SYSTEM)
tokens = {{
    name: runner_create(name=name, projects=[project], slots={slots}, labels=labels, actor=SYSTEM)[1]
    for name, labels in {runners!r}
}}
print(json.dumps({{"planner": said.getvalue().strip().splitlines()[-1], "runners": tokens}}))
"""


@pytest.fixture(scope="module")
def fleet31(fleet, tmp_path_factory) -> Iterator[Fleet31]:
    server = fleet.server
    began = time.monotonic()
    root = tmp_path_factory.mktemp("fleet31")
    names = {role: f"{SLUG}-{role}" for role in ("gpu", "prov", "edge")}
    sandboxes = backend(root / "providers", ledger=root / names["prov"] / "state" / "providers")
    labels = {"gpu": ["gpu"], "prov": [], "edge": ["edge"]}
    made_on_server = server.manage(
        "shell",
        "-c",
        SETUP.format(
            slug=SLUG,
            environments=ENVIRONMENTS,
            kind=sandboxes.kind,
            slots=SLOTS,
            runners=[(names[role], labels[role]) for role in names],
        ),
    )
    answer = json.loads(made_on_server.strip().splitlines()[-1])
    tokens = answer["runners"]
    clone = clone_for(root / "git", SLUG)
    dumps = root / "dumps"
    dumps.mkdir()
    proxy = TcpProxy(server.port)
    projects = {SLUG: clone}
    provider_table = (
        f'[providers.{sandboxes.kind}]\nprovision = "{sandboxes.provision}"\nteardown = "{sandboxes.teardown}"\n'
        "timeout_seconds = 60\n"
    )
    common: dict[str, Any] = {"projects": projects, "slots": SLOTS, "work_script": WORK}
    gpu = runner_setup(server, root, names["gpu"], token=tokens[names["gpu"]], **common)
    prov = runner_setup(
        server,
        root,
        names["prov"],
        token=tokens[names["prov"]],
        top=provider_table,
        project_options=f'environment_kind = "{sandboxes.kind}"',
        **common,
    )
    edge = runner_setup(
        server,
        root,
        names["edge"],
        token=tokens[names["edge"]],
        project_options=f"lease_seconds = {SHORT_PARTITION_LEASE}",
        server_url=proxy.url,
        **common,
    )
    for runner in (gpu, prov, edge):
        runner.env["WORK_HOLD"] = str(runner.home / "hold")
        runner.env["WORK_DUMPS"] = str(dumps)
    api = LeaseholdClient(server.url, answer["planner"])
    gpu_keys = [
        str(api.create_task(SLUG, f"gpu task {n}", status="ready", priority=10, requires=["gpu"])["key"])
        for n in range(GPU_TASKS)
    ]
    keys = gpu_keys + [
        str(api.create_task(SLUG, f"fleet task {n}", status="ready")["key"]) for n in range(TASKS - GPU_TASKS)
    ]
    made = Fleet31(server, api, keys, gpu_keys, gpu, prov, edge, proxy, sandboxes, clone, dumps)
    made.timings["setup (s)"] = round(time.monotonic() - began, 1)
    try:
        yield made
    finally:
        for runner in made.runners:
            hold(runner).unlink(missing_ok=True)
        running = [runner for runner in made.runners if runner.process is not None and runner.process.poll() is None]
        for runner in running:
            runner.signal(signal.SIGTERM)  # all at once: each waits out its parked claim, then exits
        for runner in running:
            try:
                assert runner.process is not None
                runner.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                runner.kill()
        proxy.close()
        api.close()
        print(f"\nfleet31 timings on {server.database}: {made.timings}")


def test_the_fleet_runs_30_tasks_each_done_once_through_a_kill_a_crash_a_drain_and_a_short_partition(fleet31):
    f = fleet31
    began = time.monotonic()
    for runner in f.runners:
        hold(runner).touch()
        runner.start()

    # Every slot holds a command: the gpu runner the three gpu tasks (the highest priority; no one else may).
    gpu_work, prov_work, edge_work = (held(runner, SLOTS) for runner in f.runners)
    assert sorted(record["task"] for record in gpu_work) == sorted(f.gpu_keys)
    for runner in f.runners:
        collect_slot_tokens(f, runner)
    assert len(f.slot_tokens) == 3 * SLOTS
    # The provider's sandboxes exist while their leases live, and reached the commands (LEASEHOLD_ENV_*).
    assert all(record["sandbox"] is True for record in prov_work), prov_work
    assert all(f.sandboxes.exists(record["attempt"]) for record in prov_work)
    assert all(record["sandbox"] is None for record in gpu_work + edge_work)

    # The attempt token: good for its own attempt, refused for another attempt and for claims.
    mine, other = prov_work[0], gpu_work[0]
    unclaimed = next(key for key in f.keys if key not in {r["task"] for r in gpu_work + prov_work + edge_work})
    token = mine["token"]
    assert token.startswith(f"lha_{mine['attempt']}_")
    assert attempt_token_answer(f, token, "GET", f"/attempts/{mine['attempt']}/")[0] == 200
    refusals = {
        "other attempt": attempt_token_answer(f, token, "GET", f"/attempts/{other['attempt']}/"),
        "other attempt's note": attempt_token_answer(
            f, token, "POST", f"/attempts/{other['attempt']}/notes/", {"kind": "progress", "content": "not mine"}
        ),
        "another task's claim": attempt_token_answer(f, token, "POST", f"/tasks/{unclaimed}/claim/", {}),
        "claim next": attempt_token_answer(f, token, "POST", "/claims/next/", {"project": SLUG}),
    }
    assert refusals == dict.fromkeys(refusals, (403, "PERMISSION_DENIED"))

    # kill -9 of the provider runner: its `run` children and their commands are gone within 2 s.
    runs = [int(event["pid"]) for event in live_runs(f.prov)]
    commands = [record["pid"] for record in prov_work]
    assert len(runs) == SLOTS
    assert all(alive(pid) for pid in runs + commands)
    assert f.prov.process is not None
    f.prov.process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_until(lambda: not any(alive(pid) for pid in runs + commands), timeout=5, what="children gone")
    f.timings["kill -9: children gone (s)"] = round(time.monotonic() - killed, 2)
    assert time.monotonic() - killed <= 2.0
    f.prov.process.wait()
    killed_ids = {record["attempt"] for record in prov_work}
    ended = wait_until(
        lambda: (seen := f.attempts(killed_ids)) and all(status != "active" for status, _ in seen.values()) and seen,
        timeout=20,
        what="the killed runner's attempts ended",
    )
    # `run` got the parent-death signal and handed its attempt off itself (not a lapsed lease).
    assert set(ended.values()) == {("interrupted", "client_shutdown")}
    # The ended attempt's token is dead.
    assert attempt_token_answer(f, token, "GET", f"/attempts/{mine['attempt']}/")[0] in (401, 403)
    assert attempt_token_answer(
        f, token, "POST", f"/attempts/{mine['attempt']}/notes/", {"kind": "progress", "content": "too late"}
    )[0] in (401, 403)
    # The runner is gone, so nothing tore the sandboxes down yet: its restart does, before any claim.
    assert all(f.sandboxes.exists(attempt) for attempt in killed_ids)
    f.prov.start()
    prov_work = held(f.prov, SLOTS, after=SLOTS)
    assert not f.prov.events("handoff", run=2)  # `run` had handed everything off already
    assert not any(f.sandboxes.exists(attempt) for attempt in killed_ids)
    _torn_down_before_any_claim(f.prov, run=2, attempts=killed_ids)
    assert all(record["sandbox"] is True and f.sandboxes.exists(record["attempt"]) for record in prov_work)
    collect_slot_tokens(f, f.prov)

    # The machine of the provider runner crashes: the runner and its `run` children die at once, unreported.
    runs = [int(event["pid"]) for event in live_runs(f.prov)]
    commands = [record["pid"] for record in prov_work]
    assert len(runs) == SLOTS
    os.kill(f.prov.process.pid, signal.SIGSTOP)  # it sees nothing from here on
    for pid in runs:
        os.kill(pid, signal.SIGKILL)
    crashed = time.monotonic()
    wait_until(lambda: not any(alive(pid) for pid in runs + commands), timeout=5, what="commands gone")
    assert time.monotonic() - crashed <= 2.0  # the commands die with their `run` (its death signal)
    f.prov.kill()
    crashed_ids = {record["attempt"] for record in prov_work}
    assert {status for status, _ in f.attempts(crashed_ids).values()} == {"active"}
    assert all(f.sandboxes.exists(attempt) for attempt in crashed_ids)  # the leases live: so do the sandboxes
    restarted = time.monotonic()
    f.prov.start()
    wait_until(lambda: len(f.prov.events("handoff", run=3)) == SLOTS, timeout=30, what="hand-off at registration")
    f.timings["crash: handed off after restart (s)"] = round(time.monotonic() - restarted, 2)
    assert {event["attempt"] for event in f.prov.events("handoff", run=3)} == crashed_ids
    assert set(f.attempts(crashed_ids).values()) == {("interrupted", "runner_restart")}
    _torn_down_before_any_claim(f.prov, run=3, attempts=crashed_ids)
    assert not any(f.sandboxes.exists(attempt) for attempt in crashed_ids)
    prov_work = held(f.prov, SLOTS, after=2 * SLOTS)
    collect_slot_tokens(f, f.prov)

    # Drain the gpu runner from the console: it finishes what runs, takes nothing new.
    f.console("runner_drain", f.gpu)
    hold(f.gpu).unlink()
    gpu_ids = {record["attempt"] for record in gpu_work}
    wait_until(
        lambda: {status for status, _ in f.attempts(gpu_ids).values()} == {"completed"},
        timeout=60,
        what="the drained runner's commands finished",
    )

    # A short partition of the edge runner, timed to swallow one renewal of one of its attempts.
    edge_ids = [record["attempt"] for record in edge_work]
    first, due = next_renewal(f, edge_ids)
    time.sleep(max(0.0, due - 1.0 - time.time()))  # times the cut to the renewal; no lease is waited out
    f.proxy.partition()
    cut = time.monotonic()
    wait_until(lambda: "the server cannot be reached" in run_log(f.edge, first), timeout=6,
               what="a renewal failed in the partition")  # fmt: skip
    time.sleep(max(0.0, cut + SHORT_PARTITION_SECONDS - time.monotonic()))  # the link stays cut a while
    f.proxy.restore()
    f.timings["short partition (s)"] = round(time.monotonic() - cut, 2)
    wait_until(lambda: "the server answers again" in run_log(f.edge, first), timeout=SHORT_PARTITION_LEASE / 6 + 5,
               what="the renewal after the partition")  # fmt: skip
    assert time.monotonic() - cut < SHORT_PARTITION_LEASE - 11
    assert {status for status, _ in f.attempts(edge_ids).values()} == {"active"}
    assert not any("command stopped" in run_log(f.edge, attempt) for attempt in edge_ids)

    # Let everything run to the end.
    hold(f.prov).unlink()
    hold(f.edge).unlink()
    wait_until(lambda: all(f.api.task(key)["status"] == "done" for key in f.keys), timeout=150,
               what="every task done", every=0.5)  # fmt: skip
    f.timings["30 tasks (s)"] = round(time.monotonic() - began, 1)

    rows = f.rows()
    assert Counter(row["task"] for row in rows if row["status"] == "completed") == dict.fromkeys(f.keys, 1)
    assert {row["status"] for row in rows} <= {"completed", "interrupted"}  # nothing expired, nothing lost
    interrupted = {row["id"]: row["reason"] for row in rows if row["status"] == "interrupted"}
    errors = [event["message"] for runner in f.runners for event in runner.events("run_error")]
    assert interrupted == {
        **dict.fromkeys(killed_ids, "client_shutdown"),
        **dict.fromkeys(crashed_ids, "runner_restart"),
    }, errors
    assert {row["id"] for row in rows if row["status"] == "completed"} >= set(edge_ids)  # the partition cost nothing
    gpu_agents = {f"{f.gpu.name}.{n}" for n in range(1, SLOTS + 1)}
    assert {row["agent"] for row in rows if row["task"] in f.gpu_keys} <= gpu_agents
    assert sorted(row["task"] for row in rows if row["agent"] in gpu_agents) == sorted(f.gpu_keys)
    assert len(f.gpu.work()) == GPU_TASKS  # drained: no new task
    prov_attempts = f.prov.work()
    assert all(record["sandbox"] is True for record in prov_attempts)
    assert not any(f.sandboxes.exists(record["attempt"]) for record in prov_attempts)
    assert not list((f.prov.home / "state" / "providers").glob("*.json"))
    _no_token_reached_a_command(f, expected=len(rows))
    # The runners never exit on an empty queue; the drained one idles.
    assert all(runner.process is not None and runner.process.poll() is None for runner in f.runners)
    wait_until(lambda: f.slot_states(f.gpu) == ["idle"] * SLOTS, timeout=40, what="the drained runner idles")
    assert len(f.gpu.events("claim")) == GPU_TASKS


def _torn_down_before_any_claim(runner: RunnerProcess, *, run: int, attempts: set[int]) -> None:
    wait_until(lambda: runner.events("claim", run=run), timeout=60, what=f"a claim of {runner.name}")
    events = runner.events(run=run)
    kinds = [event["event"] for event in events]
    torn = [
        index
        for index, event in enumerate(events)
        if event["event"] == "provider" and "tore down" in event["message"]
        and any(f"attempt {attempt}" in event["message"] for attempt in attempts)
    ]  # fmt: skip
    assert len(torn) == len(attempts), [event["message"] for event in events if event["event"] == "provider"]
    assert max(torn) < kinds.index("claim")


def _no_token_reached_a_command(f: Fleet31, *, expected: int) -> None:
    dumps = sorted(f.dumps.glob("*.json"))
    assert len(dumps) >= expected - 3  # a crashed or killed command may have been stopped before it dumped
    secrets = [*runner_tokens(f), *f.slot_tokens]
    token_files = {str(runner.home / "runner.token") for runner in f.runners}
    for path in dumps:
        text = path.read_text()
        dump = json.loads(text)
        assert not [secret for secret in secrets if secret in text], path.name
        assert not TOKEN_SHAPE.findall(text), (path.name, TOKEN_SHAPE.findall(text))
        assert "LEASEHOLD_TOKEN" not in dump["env"]
        assert dump["env"]["LEASEHOLD_ATTEMPT_TOKEN"].startswith(f"lha_{path.stem}_")
        assert not token_files & set(dump["fds"].values())


def test_a_long_partition_ends_with_a_refused_late_report_and_the_work_on_the_branch_for_the_successor(fleet31):
    f = fleet31
    began = time.monotonic()
    assert f.edge.stop() == 0
    f.edge.config.write_text(
        f.edge.config.read_text().replace(
            f"lease_seconds = {SHORT_PARTITION_LEASE}", f"lease_seconds = {LONG_PARTITION_LEASE}"
        )
    )
    hold(f.edge).touch()
    f.edge.start()
    before = len(f.edge.work())
    key = str(f.api.create_task(SLUG, "across a long partition", status="ready", requires=["edge"])["key"])
    record = held(f.edge, 1, after=before)[0]
    assert record["task"] == key
    attempt_id = record["attempt"]

    f.proxy.partition()
    cut = time.monotonic()
    wait_until(lambda: "command stopped" in run_log(f.edge, attempt_id), timeout=30, what="run stopped its command")
    f.timings["long partition: command stopped after (s)"] = round(time.monotonic() - cut, 2)
    assert not alive(record["pid"])
    attempt = f.api.attempt(attempt_id)
    assert attempt["status"] == "active"  # stopped before the server's lease ran out
    branch, worktree = attempt["branch"], Path(attempt["worktree_path"])
    assert git(worktree, "rev-parse", "HEAD") == record["head"]  # the work is kept, committed on the branch
    assert git(f.clone, "rev-parse", f"refs/heads/{branch}") == record["head"]

    # The server's lease runs out (the expiry service at the lease's end: nobody sleeps), and a successor on
    # another runner claims the task: only edge slots could, so the requirement is dropped.
    expire_on_the_server(f.server, attempt_id)
    task = f.api.task(key)
    f.api.update_task(key, version=task["version"], changes={"requires": []})
    wait_until(lambda: any(r["task"] == key for r in f.prov.work()), timeout=60, what="a successor's command")
    f.proxy.restore()
    refused = wait_until(
        lambda: [event for event in f.edge.events("refused") if event.get("attempt") == attempt_id],
        timeout=90,
        what="the late report refused",
    )
    f.timings["long partition phase (s)"] = round(time.monotonic() - began, 1)
    assert refused[0]["code"] == "STALE_EPOCH", refused
    wait_until(lambda: f.api.task(key)["status"] == "done", timeout=60, what="the successor finished")
    comments = [comment["body"] for comment in f.api.comments(key)["results"]]
    assert any(f"attempt {attempt_id} refused (STALE_EPOCH)" in body for body in comments), comments
    rows = [row for row in f.rows() if row["task"] == key]
    assert [(row["status"], row["agent"].split(".")[0]) for row in rows] == [
        ("expired", f.edge.name),
        ("completed", f.prov.name),
    ]
    after = next(r for r in f.prov.work() if r["task"] == key)
    assert after["inherited"] == f"{key} by attempt {attempt_id}\n"  # the successor took over the branch
    final = git(f.clone, "rev-parse", f"refs/heads/{branch}")
    assert final == after["head"]
    assert subprocess.run(["git", "merge-base", "--is-ancestor", record["head"], final], cwd=f.clone).returncode == 0
