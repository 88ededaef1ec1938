"""Issue 32's first failure with a real `leasehold run`: while a `python -m agent run` process holds a task
and renews it against the live server, an operator edits the task's title and priority in Chromium (the
browser sends the textareas with CRLF line endings). The run is not broken: it keeps renewing, finishes
`done` (exit 0, no acknowledgement asked) and the edit is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from agent.cli.output import EXIT_OK
from leases.models import Attempt, AttemptStatus
from ledger.models import Event, EventType, Task
from tests.agent.live import REPO, agent_env
from tests.console.browser.conftest import login
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

# `run` follows the changes feed (its lease keeper's long polls) through the live server.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("feed_waiters_ended")]

DESCRIPTION = "Fix the search copy.\nKeep the tone.\n\nThen ship it."
CRITERIA = "- the copy reads well\n- nothing else moves"
LEASE_SECONDS = 6  # renewed every 2 s
DEADLINE_SECONDS = 60


def _wait_for(condition, what: str, run: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if run.poll() is not None:
            stdout, stderr = run.communicate()
            pytest.fail(f"the run ended before {what}: {run.returncode}\n{stdout}\n{stderr}")
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_SECONDS} s"
        time.sleep(0.1)


def test_an_admin_edit_while_leasehold_run_works_keeps_the_edit_and_the_run_finishes_done(
    page, ledger_admin, live_server, settings, tmp_path
):
    settings.LEASEHOLD_MIN_LEASE_SECONDS = 1
    project = ProjectFactory(slug="web", name="Web app")
    holder = AgentFactory(handle="agent-07", projects=[project])
    task = TaskFactory(
        project=project,
        title="Fix the search copy",
        description=DESCRIPTION,
        acceptance_criteria=CRITERIA,
        priority=1,
        status="ready",
    )
    env = agent_env(tmp_path)
    config = Path(env["LEASEHOLD_CONFIG"])
    config.parent.mkdir(mode=0o700)
    config.write_text(json.dumps({"url": live_server.url, "token": holder.api_token, "project": "web"}))
    config.chmod(0o600)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    go = tmp_path / "go"
    # The agent's command: works until the operator's edit is saved (the test says so), then exits 0.
    child = textwrap.dedent(
        f"""
        import os, sys, time
        deadline = time.monotonic() + {DEADLINE_SECONDS}
        while not os.path.exists({str(go)!r}):
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.1)
        """
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "agent", "--json", "run", task.key, "--lease-seconds", str(LEASE_SECONDS),
         "--", sys.executable, "-c", child],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for(
            lambda: Attempt.objects.filter(task=task, status=AttemptStatus.ACTIVE, renew_count__gte=1).exists(),
            "renewal",
            run,
        )
        attempt = Attempt.objects.get(task=task, status=AttemptStatus.ACTIVE)
        version = Task.objects.get(pk=task.pk).version

        login(page, "ops")
        page.goto(f"/admin/ledger/task/{task.pk}/change/")
        page.click("text=Edit…")
        expect(page.locator("#id_description")).to_have_value(DESCRIPTION)
        page.fill("#id_title", "Fix the search copy, kindly")
        page.fill("#id_priority", "8")
        page.click("#lh-edit-save")
        expect(page.locator(".messagelist")).to_contain_text(f"Saved {task.key}:")
        expect(page.locator(".messagelist")).to_contain_text(f"(now version {version + 1})")

        # The holder goes on renewing after the edit, then its command is done.
        renewed = Attempt.objects.get(pk=attempt.pk).renew_count
        _wait_for(lambda: Attempt.objects.get(pk=attempt.pk).renew_count > renewed, "renewal after the edit", run)
        go.write_text("done")
        stdout, stderr = run.communicate(timeout=DEADLINE_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()

    assert run.returncode == EXIT_OK, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert (result["outcome"], result["lease_lost"]) == ("done", False)
    assert "ACKNOWLEDGEMENT_REQUIRED" not in stderr
    finished = Attempt.objects.get(pk=attempt.pk)
    assert finished.status == AttemptStatus.COMPLETED
    kept = Task.objects.get(pk=task.pk)
    assert (kept.status, kept.title, kept.priority) == ("done", "Fix the search copy, kindly", 8)
    assert (kept.description, kept.acceptance_criteria) == (DESCRIPTION, CRITERIA)  # no CRLF crept in
    updated = Event.objects.filter(task=task, type=EventType.TASK_UPDATED).get()
    assert sorted(updated.payload["fields"]) == ["priority", "title"]
    assert not Event.objects.filter(task=task, type=EventType.TASK_CONTESTED).exists()

    page.goto(f"/admin/ledger/task/{task.pk}/change/")
    expect(page.locator(".lh-summary")).to_contain_text("Done")
