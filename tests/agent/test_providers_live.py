"""Environment providers against a live server (SPEC §23.3): the sandbox lives exactly as long as the lease.

Real provider scripts (a PostgreSQL database per attempt on the PostgreSQL lane, a directory per attempt on
SQLite-only lanes: `tests.agent.provider_backends`), a real server process, and `leasehold run` as the runner
starts it, reusing the attempt the runner claimed.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

from agent.client.models import Claim
from agent.runner.providers import Providers, ProvisionFailed, provider_specs
from agent.workspace import state
from agent.workspace.state import HeldAttempt
from tests.agent.live import leasehold, state_files
from tests.agent.provider_backends import Backend, backend

_environments = itertools.count(1)


def test_the_postgresql_lane_runs_the_database_provider(tmp_path):
    # Never skipped there: on a postgres DATABASE_URL the tests below make and drop real databases.
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    made = backend(tmp_path, ledger=tmp_path / "ledger")
    assert made.kind == ("database" if on_postgres else "sandbox")
    assert ("createdb" in made.provision.read_text()) is on_postgres


@pytest.fixture
def runner_state(tmp_path) -> Path:
    return tmp_path / "runner-state"


@pytest.fixture
def sandboxes(tmp_path, runner_state) -> Backend:
    return backend(tmp_path / "providers", ledger=runner_state / "providers")


@pytest.fixture
def environment(fleet, sandboxes) -> str:
    """A fresh environment of the backend's kind in the fleet's project (one per test: nothing left allocated)."""
    name = f"prov-{os.getpid()}-{next(_environments)}"
    fleet.server.manage(
        "shell",
        "-c",
        "from environments.services import environment_create; from ledger.actors import SYSTEM; "
        "from ledger.models import Project; "
        f"environment_create(project=Project.objects.get(slug={fleet.project!r}), name={name!r}, "
        f"kind={sandboxes.kind!r}, actor=SYSTEM)",
    )
    return name


def providers_of(sandboxes: Backend, runner_state: Path, *, provision: Path | None = None) -> Providers:
    tables = {
        sandboxes.kind: {
            "provision": str(provision or sandboxes.provision),
            "teardown": [str(sandboxes.teardown)],
            "timeout_seconds": 60,
        }
    }
    return Providers(provider_specs(tables), state_dir=runner_state, log=lambda message: None)


def claim_with_environment(fleet, api, environment: str) -> Claim:
    claim = api.claim(fleet.ready_task(), environment=environment, lease_seconds=120)
    assert claim.context["environment"]["name"] == environment
    return claim


def test_a_sandbox_is_made_for_the_attempt_reaches_the_command_and_is_gone_when_it_ends(
    fleet, api, logged_in, tmp_path, sandboxes, runner_state, environment
):
    providers = providers_of(sandboxes, runner_state)
    claim = claim_with_environment(fleet, api, environment)
    attempt_id = claim.lease.attempt_id
    assert not sandboxes.exists(attempt_id)

    sandbox = providers.prepare(api, claim)

    assert sandbox is not None
    assert sandboxes.exists(attempt_id)
    field, value = sandboxes.value_of(attempt_id)
    assert sandbox.provisioned == {field: value}
    assert providers.recorded() == [attempt_id]
    # On the allocation's record, hence in the work context `leasehold run` reads.
    resources = api.context(claim.lease.task)["environment"]["resources"]
    assert resources[field] == value
    # The runner hands the attempt to `leasehold run`, which reuses it and gives the command LEASEHOLD_ENV_*.
    config_dir = Path(logged_in["LEASEHOLD_CONFIG"]).parent
    state.save(config_dir, HeldAttempt.from_claim(claim, server=fleet.server.url, owner="runner", pid=os.getpid()))
    seen = tmp_path / "command-env.json"
    dump = f"import json, os; json.dump(dict(os.environ), open({str(seen)!r}, 'w'))"
    done = leasehold("--json", "run", "--", sys.executable, "-c", dump, env=logged_in)
    assert done.returncode == 0, done.stderr
    command_env = json.loads(seen.read_text())
    variable = {"database_url": "LEASEHOLD_ENV_DATABASE_URL", "host_path": "LEASEHOLD_ENV_HOST_PATH"}[field]
    assert command_env[variable] == value
    assert command_env["LEASEHOLD_ENV_NAME"] == environment
    assert "LEASEHOLD_TOKEN" not in command_env
    assert api.attempt(attempt_id)["status"] == "completed"
    assert state_files(logged_in) == []

    assert providers.release(attempt_id) is True

    assert not sandboxes.exists(attempt_id)
    assert providers.recorded() == []


def test_a_failed_provision_leaves_nothing_and_hands_the_claim_off(fleet, api, sandboxes, runner_state, environment):
    providers = providers_of(sandboxes, runner_state, provision=sandboxes.failing_provision)
    claim = claim_with_environment(fleet, api, environment)
    attempt_id = claim.lease.attempt_id

    with pytest.raises(ProvisionFailed) as failed:
        providers.prepare(api, claim)

    assert failed.value.handed_off is True
    assert "no space left on device" in failed.value.stderr_tail
    assert not sandboxes.exists(attempt_id)  # the half-made sandbox was torn down
    assert providers.recorded() == []
    attempt = api.attempt(attempt_id)
    assert (attempt["status"], attempt["interruption_reason_code"]) == ("interrupted", "environment_unavailable")
    notes = [note["excerpt"] for note in attempt["notes"]]
    assert any("no space left on device" in note for note in notes), notes
    assert api.task(claim.lease.task)["status"] == "ready"  # handed off: claimable again


def test_a_crashed_runners_sandbox_is_torn_down_at_the_next_start_once_its_attempt_is_not_held(
    fleet, api, sandboxes, runner_state, environment
):
    claim = claim_with_environment(fleet, api, environment)
    attempt_id = claim.lease.attempt_id
    providers_of(sandboxes, runner_state).prepare(api, claim)
    assert sandboxes.exists(attempt_id)
    # The runner dies here: its record stays. A new runner that still holds the attempt keeps the sandbox.
    restarted = providers_of(sandboxes, runner_state)
    assert restarted.teardown_leftovers({attempt_id}) == []
    assert sandboxes.exists(attempt_id)
    # Registration handed the attempt off (runner_restart): it is no longer held, and its sandbox goes.
    api.finish(claim.lease, "handoff", interruption_reason_code="runner_restart", result_summary="restart")

    assert restarted.teardown_leftovers(set()) == [attempt_id]

    assert not sandboxes.exists(attempt_id)
    assert restarted.recorded() == []
