"""`leasehold land` against a stand-in of the landing endpoints (SPEC §21.2), with real git.

Only the HTTP server is faked (`httpx.MockTransport`); the live-server story
is the lead's end-to-end test.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from agent.cli.land_commands import landing_text
from agent.cli.leasehold import build_parser
from agent.land import lander
from agent.land.api import LandingClient
from agent.land.git import LandTask
from tests.agent.gitrepos import git, git_env
from tests.agent.landing_repos import Landing, make_landing


@pytest.fixture(autouse=True)
def _no_git_config_of_this_machine(monkeypatch):
    for name, value in git_env().items():
        monkeypatch.setenv(name, value)


class FakeServer:
    """Answers /landings/next/ from a list of claims (204 when it runs out), records renewals and finishes."""

    def __init__(self, landing: Landing, claims: list[list[LandTask] | None], *, check: str = "", renew_code: str = ""):
        self.landing = landing
        self.claims = list(claims)
        self.check = check
        self.renew_code = renew_code
        self.requests: list[tuple[str, dict[str, Any], httpx.Headers]] = []
        self.finished: list[dict[str, Any]] = []
        self.next_id = 1

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        path = request.url.path.removeprefix("/api/v1")
        self.requests.append((path, body, request.headers))
        if path == "/landings/next/":
            tasks = self.claims.pop(0) if self.claims else None
            if tasks is None:
                return httpx.Response(204)
            return httpx.Response(201, json=self.claim(tasks))
        if path.endswith("/renew/"):
            if self.renew_code:
                error = {"code": self.renew_code, "message": "gone", "retryable": False, "details": {}}
                return httpx.Response(409, json={"error": error})
            return httpx.Response(200, json={"lease_expires_at": "2999-01-01T00:00:00Z", "renew_count": 1})
        if path.endswith("/finish/"):
            self.finished.append(body)
            landing = {"id": int(path.split("/")[2]), "status": "finished", "result": body["result"]}
            return httpx.Response(200, json={"landing": landing, "tasks": []})
        return httpx.Response(404, json={"error": {"code": "NOT_FOUND", "message": path, "details": {}}})

    def claim(self, tasks: list[LandTask]) -> dict[str, Any]:
        number, self.next_id = self.next_id, self.next_id + 1
        landing = {
            "id": number,
            "epoch": 7,
            "project": "agt",
            "target_branch": "main",
            "method": "merge",
            "check_command": self.check,
            "check_timeout_seconds": 60,
            "batch_max": len(tasks),
            "remote": str(self.landing.remote),
            "repository": "",
            "lease_token": f"token-{number}",
            "lease_seconds": 3,
            "lease_expires_at": "2999-01-01T00:00:00Z",
            "renew_every_seconds": 1,
        }
        wire = [
            {
                "key": task.key,
                "title": task.title,
                "attempt_id": 100 + index,
                "epoch": 1,
                "branch": task.branch,
                "head_commit": task.head_commit,
                "label": task.label,
            }
            for index, task in enumerate(tasks)
        ]
        return {"landing": landing, "tasks": wire}

    def client(self) -> LandingClient:
        return LandingClient("http://leasehold.test", "agent-token", transport=httpx.MockTransport(self))


@pytest.fixture
def landing(tmp_path) -> Landing:
    return make_landing(tmp_path)


def test_a_landing_is_claimed_landed_and_finished_with_every_task(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    server = FakeServer(landing, [[one]])

    report = lander.land_once(server.client(), "agt", landing.lander)

    assert report.exit_code == 0
    assert server.finished == [
        {
            "result": "landed",
            "landed_commit": landing.tip(),
            "check_runs": 0,
            "tasks": [{"key": "AGT-1", "outcome": "landed"}],
        }
    ]
    path, _, headers = server.requests[-1]
    assert (path, headers["X-Lease-Token"], headers["X-Lease-Epoch"]) == ("/landings/1/finish/", "token-1", "7")
    assert server.requests[0][1] == {"project": "agt"}


def test_nothing_to_land_exits_3(landing):
    server = FakeServer(landing, [])

    report = lander.land_once(server.client(), "agt", landing.lander)

    assert (report.exit_code, report.data) == (3, {"landing": None})
    assert server.finished == []


def test_a_red_check_finishes_check_failed_with_the_output_and_exits_7(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    tip = landing.tip()
    server = FakeServer(landing, [[one]], check="echo red-because; exit 3")

    report = lander.land_once(server.client(), "agt", landing.lander)

    assert report.exit_code == 7
    (finished,) = server.finished
    assert (finished["result"], finished["check_runs"], "landed_commit" in finished) == ("check_failed", 1, False)
    assert finished["tasks"][0]["outcome"] == "check_failed"
    assert "red-because" in finished["tasks"][0]["output_tail"]
    assert landing.tip() == tip


def test_a_lost_landing_lease_stops_the_check_pushes_nothing_finishes_nothing_and_exits_5(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    tip = landing.tip()
    server = FakeServer(landing, [[one]], check="sleep 60", renew_code="LEASE_EXPIRED")

    report = lander.land_once(server.client(), "agt", landing.lander)

    assert report.exit_code == 5
    assert server.finished == []
    assert landing.tip() == tip
    assert landing.worktrees() == [f"worktree {landing.lander}"]
    renewals = [request for request in server.requests if request[0].endswith("/renew/")]
    assert len(renewals) == 1  # the refusal ends it: the token is not sent again


def test_a_second_signal_abandons_the_landing_without_pushing(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    tip = landing.tip()
    server = FakeServer(landing, [[one]], check="sleep 60")
    stopping = lander.Stopping()
    timer = threading.Timer(1.0, lambda: (stopping.signal(), stopping.signal()))
    timer.start()

    report = lander.land_once(server.client(), "agt", landing.lander, stopping=stopping)

    timer.join()
    assert (report.exit_code, report.data["result"]) == (0, "abandoned")
    assert server.finished == []
    assert landing.tip() == tip
    assert landing.worktrees() == [f"worktree {landing.lander}"]


def test_watch_waits_on_the_server_lands_what_comes_and_stops_after_the_current_landing(landing):
    one = landing.deliver("AGT-1", {"one.txt": "one\n"})
    server = FakeServer(landing, [None, None, [one]])
    stopping = lander.Stopping()
    reports: list[lander.Report] = []

    def emit(report: lander.Report) -> None:
        reports.append(report)
        stopping.signal()  # SIGTERM after the first landing

    code = lander.watch(server.client(), "agt", landing.lander, stopping=stopping, emit=emit)

    assert code == 0
    assert [report.exit_code for report in reports] == [0]
    claims = [body for path, body, _ in server.requests if path == "/landings/next/"]
    assert claims == [{"project": "agt", "wait": 30}] * 3  # never exits on an empty queue; never polls without waiting
    assert git(landing.remote, "show", "main:one.txt") == "one"


def test_the_cli_knows_land_and_landing():
    parser = build_parser()

    land = parser.parse_args(["land", "--watch", "--repo", "../lander-clone", "--project", "agt", "--json"])
    landing = parser.parse_args(["landing", "--project", "agt"])

    assert (land.watch, land.repo, land.project, land.json) == (True, "../lander-clone", "agt", True)
    assert landing.handler.__name__ == "cmd_landing"


def test_the_landing_page_reads_for_a_human():
    page = {
        "settings": {"target_branch": "main", "land_method": "squash", "check_command": "make test"},
        "queue": [
            {"key": "AGT-2", "title": "Second", "priority": 0, "branch": "feature/agt-2", "head_commit": "ab" * 20}
        ],
        "live": None,
        "recent": [{"id": 4, "status": "finished", "result": "landed", "tasks": [{"key": "AGT-1"}]}],
    }

    text = landing_text("agt", page)

    assert text.splitlines()[0] == "agt: landing onto main by squash"
    assert "  1. AGT-2 Second [feature/agt-2 abababababab]" in text
    assert "  landing 4: landed AGT-1" in text
