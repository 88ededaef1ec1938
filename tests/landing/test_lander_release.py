"""`leasehold land` gives a landing back when it is told to stop (SPEC §21.2), against the real API with real git.

The lander's own code (`agent.land.lander`) talks to this process's Django app (httpx's WSGI transport,
the fake clock, the suite's database) and lands from real git repositories. A landing granted just
as the lander is told to stop, and a landing abandoned by the second signal, used to stay held on the
server until its lease lapsed (the queue blocked for a whole landing lease, and the task charged
with a failed landing); now the lander releases it, and the next lander takes the target at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.core.handlers.wsgi import WSGIHandler

from agent.client.errors import LeaseholdError
from agent.land import lander
from agent.land.api import LandingClient
from landing.models import Landing, LandingStatus
from landing.services import LandingSettings, landing_claim_next, project_set_landing
from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType, Project, Task, TaskStatus
from tests.agent.gitrepos import git_env
from tests.agent.landing_repos import Landing as Repos
from tests.agent.landing_repos import make_landing
from tests.api.conftest import client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 60
URL = "http://localhost"


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


class Server(httpx.BaseTransport):
    """This process's API; `after_grant(response)` runs once a claim was answered 201 (the server handed it over)."""

    def __init__(self) -> None:
        self.app = httpx.WSGITransport(app=WSGIHandler())
        self.after_grant: Callable[[], None] | None = None
        self.paths: list[tuple[str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.app.handle_request(request)
        response.read()
        path = request.url.path.removeprefix("/api/v1")
        self.paths.append((path, response.status_code))
        if path == "/landings/next/" and response.status_code == 201 and self.after_grant is not None:
            after, self.after_grant = self.after_grant, None
            after()
        return response


@pytest.fixture
def repos(tmp_path) -> Repos:
    return make_landing(tmp_path)


@pytest.fixture
def queue(repos, clock) -> tuple[Project, Agent, Agent]:
    """A project landing onto the bare remote's main; a task of it delivered at a real pushed head."""
    project: Project = ProjectFactory(slug="web", repository=str(repos.remote))  # type: ignore[assignment]
    project_set_landing(
        project=project, settings=LandingSettings(target_branch="main", check_command="sleep 60"), actor=SYSTEM
    )
    worker: Agent = AgentFactory(projects=[project])  # type: ignore[assignment]
    landing_agent: Agent = AgentFactory(handle="lander-1", projects=[project])  # type: ignore[assignment]
    created: Task = TaskFactory(project=project)  # type: ignore[assignment]
    key = created.key
    assert key == "WEB-1"
    task = repos.deliver(key, {"one.txt": "one\n"})
    api = client_for(worker)
    claim = api.post(f"/api/v1/tasks/{key}/claim/", {"branch": task.branch}, format="json")
    assert claim.status_code == 201, claim.content
    body = claim.json()
    finish = api.post(
        f"/api/v1/attempts/{body['attempt']['id']}/finish/",
        {"outcome": "done", "git": {"head_commit": task.head_commit, "pushed": True}},
        format="json",
        HTTP_X_LEASE_TOKEN=body["lease_token"],
        HTTP_X_LEASE_EPOCH=str(body["epoch"]),
    )
    assert finish.status_code == 200, finish.content
    assert Task.objects.get(key="WEB-1").status == TaskStatus.DELIVERED
    return project, worker, landing_agent


def _client(server: Server, agent: Agent) -> LandingClient:
    return LandingClient(URL, agent.api_token, transport=server, max_retries=0)  # type: ignore[attr-defined]


def _nothing_held() -> None:
    """The defect this pins: the landing stayed live until its lease lapsed, and the queue waited for it."""
    held = [(row.pk, row.lease_expires_at.isoformat()) for row in Landing.objects.filter(status=LandingStatus.ACTIVE)]
    assert held == [], f"landing(s) held until their lease lapses: {held}"


def _the_target_is_free_at_once(project: Project) -> None:
    """Another lander takes the task now, without the clock moving: nothing was left to lapse."""
    other = AgentFactory(projects=[project])
    grant = landing_claim_next(project=Project.objects.get(pk=project.pk), agent=other, lease_seconds=LEASE)
    assert grant is not None, "the target is still held by the landing the lander was told to give up"
    assert [entry.task.key for entry in grant.entries] == ["WEB-1"]


def _given_back(report: lander.Report) -> Landing:
    (landing,) = Landing.objects.all()
    assert landing.status == LandingStatus.RELEASED, (landing.status, report.text)
    task = Task.objects.get(key="WEB-1")
    assert (task.status, task.failed_landings) == (TaskStatus.DELIVERED, 0)
    assert Event.objects.filter(task=task, type=EventType.ATTEMPT_RELEASED).count() == 1
    assert not Event.objects.filter(task=task, type=EventType.LANDING_EXPIRED).exists()
    return landing


def test_a_landing_granted_as_the_signal_breaks_the_claim_is_given_back(queue, repos, clock):
    """The signal breaks the parked claim just after the server handed a landing over: its answer is lost."""
    project, _, landing_agent = queue
    server = Server()
    stopping = lander.Stopping()
    server.after_grant = stopping.signal  # SIGTERM now: raises StopClaiming into the claim in flight
    tip = repos.tip()

    report = lander.land_once(
        _client(server, landing_agent), "web", repos.lander, wait=30, lease_seconds=LEASE, stopping=stopping
    )

    _nothing_held()
    assert report.exit_code == lander.EXIT_OK, report
    assert (report.data["result"], report.data["released"]) == ("abandoned", True)
    _given_back(report)
    # It learnt of the grant by the claim's Idempotency-Key: the heartbeat under it was refused, the replay answered.
    assert [path for path, _ in server.paths] == [
        "/landings/next/",
        "/agents/me/heartbeat/",
        "/landings/next/",
        f"/landings/{report.data['landing']}/release/",
    ]
    assert repos.tip() == tip
    assert repos.worktrees() == [f"worktree {repos.lander}"]
    _the_target_is_free_at_once(project)


def test_a_claim_broken_before_the_server_answered_took_nothing_and_never_will(queue, repos, clock):
    """The signal breaks the claim while it is parked (nothing granted yet): the claim's key is spent."""
    _, _, landing_agent = queue
    server = Server()
    stopping = lander.Stopping()
    client = _client(server, landing_agent)
    keys: list[str] = []
    real = server.handle_request

    def parked(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/landings/next/") and not keys:
            keys.append(request.headers["Idempotency-Key"])
            stopping.signal()  # before the server answered: the request is dropped
        return real(request)

    server.handle_request = parked

    report = lander.land_once(client, "web", repos.lander, wait=30, lease_seconds=LEASE, stopping=stopping)

    assert (report.exit_code, report.data) == (lander.EXIT_NOTHING, {"landing": None})
    assert "it took nothing" in report.text
    # The broken claim, if it reached the server late, claims nothing under its key.
    with pytest.raises(LeaseholdError) as refused:
        client.landing_next("web", idempotency_key=keys[0])
    assert refused.value.code == "IDEMPOTENCY_CONFLICT"
    assert not Landing.objects.exists()


def test_a_grant_answered_after_the_first_signal_is_given_back_not_landed(queue, repos, clock):
    project, _, landing_agent = queue
    server = Server()
    stopping = lander.Stopping()
    server.after_grant = stopping.after_current.set  # the signal came between the answer and the landing
    tip = repos.tip()

    report = lander.land_once(
        _client(server, landing_agent), "web", repos.lander, wait=30, lease_seconds=LEASE, stopping=stopping
    )

    _nothing_held()
    assert report.data["released"] is True, report
    _given_back(report)
    assert repos.tip() == tip
    _the_target_is_free_at_once(project)


def test_the_second_signal_abandons_the_landing_and_gives_it_back(queue, repos, clock):
    project, _, landing_agent = queue
    server = Server()
    stopping = lander.Stopping()
    tip = repos.tip()
    started = threading.Event()
    # The check (`sleep 60`) is running once the landing is claimed and merged; then SIGTERM twice.
    server.after_grant = started.set
    signals = threading.Thread(
        target=lambda: (started.wait(30), threading.Event().wait(1.0), stopping.signal(), stopping.signal()),
        daemon=True,
    )
    signals.start()

    report = lander.land_once(
        _client(server, landing_agent), "web", repos.lander, lease_seconds=LEASE, stopping=stopping
    )

    signals.join(5)
    _nothing_held()
    assert (report.exit_code, report.data["result"], report.data["released"]) == (lander.EXIT_OK, "abandoned", True)
    landing = _given_back(report)
    assert report.data["landing"] == landing.pk
    assert repos.tip() == tip
    assert repos.worktrees() == [f"worktree {repos.lander}"]
    _the_target_is_free_at_once(project)


def test_watch_told_to_stop_as_a_landing_is_granted_exits_and_leaves_nothing_held(queue, repos, clock):
    project, _, landing_agent = queue
    server = Server()
    stopping = lander.Stopping()
    server.after_grant = stopping.signal
    reports: list[dict[str, Any]] = []

    code = lander.watch(
        _client(server, landing_agent),
        "web",
        repos.lander,
        stopping=stopping,
        emit=lambda report: reports.append(report.data),
        lease_seconds=LEASE,
    )

    assert code == lander.EXIT_OK
    _nothing_held()
    assert [(data["result"], data["released"]) for data in reports] == [("abandoned", True)]
    assert not Landing.objects.filter(status=LandingStatus.ACTIVE).exists()
    _the_target_is_free_at_once(project)
