"""Process CPU and a profile of the agent cycle through the WSGI handler, full stack against lean path;
the empty claim-next and the MCP-shaped keyed cycle (with few and with many ready tasks) on the lean path.

Not a test (pytest collects `test_*.py` only); run it by name, on either database:

    LEASEHOLD_LEAN_PROFILE_DIR=/tmp/lean .venv/bin/python -m pytest tests/api/profile_lean_path.py -q -s

One agent repeats claim-next, renew, checkpoint note, finish (done) — the
bench's `cpu` cycle — through `WSGIHandler` and through `LeanWSGIHandler`
in turns, with real transactions (as in a server worker: below the WSGI call
the same code runs), after warm-up cycles. Printed: CPU per cycle
(`time.process_time`, median of the rounds) for each, and the top entries of
a cProfile pass of each by own and by cumulative time, saved in
`LEASEHOLD_LEAN_PROFILE_DIR` when it is set.
"""

from __future__ import annotations

import cProfile
import io
import itertools
import json
import os
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIHandler

from api.lean import LeanWSGIHandler
from tests.api.test_lean_path import call
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

WARMUP = 20
CYCLES = 60
ROUNDS = 5
PROFILED = 100


def _unkeyed() -> dict[str, str]:
    return {}


def _key_maker() -> Callable[[], dict[str, str]]:
    """A fresh `Idempotency-Key` header at each call."""
    serial = itertools.count(1)
    return lambda: {"Idempotency-Key": f"k-{next(serial)}"}


def _cycle(
    app: Callable[..., Any],
    token: str,
    slug: str,
    key: Callable[[], dict[str, str]] = _unkeyed,
    *,
    renew: bool = True,
) -> None:
    """One cycle; `key` gives the `Idempotency-Key` header of claim-next, the note and finish (none by default;
    keyed as `leasehold mcp` sends them when given). Without `renew`, what `leasehold mcp`'s claim_next,
    checkpoint and finish send."""
    status, _, body = call(app, "POST", "/api/v1/claims/next/", {"project": slug}, token=token, headers=key())
    assert status.startswith("201"), (status, body)
    claim = json.loads(body)
    attempt = f"/api/v1/attempts/{claim['attempt']['id']}"
    proof = {"X-Lease-Token": claim["lease_token"], "X-Lease-Epoch": str(claim["epoch"])}
    if renew:
        assert call(app, "POST", f"{attempt}/renew/", {}, token=token, headers=proof)[0].startswith("200")
    note = {"kind": "checkpoint", "content": "half way", "next_steps": ["finish"]}
    assert call(app, "POST", f"{attempt}/notes/", note, token=token, headers={**proof, **key()})[0].startswith("201")
    finished = call(app, "POST", f"{attempt}/finish/", {"outcome": "done"}, token=token, headers={**proof, **key()})
    assert finished[0].startswith("200")


def _time_and_profile(
    name: str, run: Callable[[], None], *, per_round: int, unit: str, warmup: int, profiled: int = PROFILED
) -> None:
    """`run` repeated: process CPU per call (median of ROUNDS rounds of `per_round`), then `profiled` calls profiled."""
    for _ in range(warmup):
        run()
    spent: list[float] = []
    for _ in range(ROUNDS):
        began = time.process_time()
        for _ in range(per_round):
            run()
        spent.append((time.process_time() - began) / per_round * 1000)
    rounds = ", ".join(f"{value:.3f}" for value in spent)
    print(f"{name}: {statistics.median(spent):.3f} ms CPU per {unit} (rounds: {rounds})")
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    for _ in range(profiled):
        run()
    profile.disable()
    _report(name, profile)


def _report(name: str, profile: cProfile.Profile) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out)
        stats.sort_stats(order).print_stats(25)
        text = out.getvalue()
        print(f"\n===== {name}, by {order} =====\n{text}")
        folder = os.environ.get("LEASEHOLD_LEAN_PROFILE_DIR")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / f"lean-{name}-{order}.txt").write_text(text)
            profile.dump_stats(str(Path(folder) / f"lean-{name}.prof"))


@pytest.mark.django_db(transaction=True)
def test_profile_the_cycle(clock):
    project = ProjectFactory(slug="lean")
    token = AgentFactory(projects=[project]).api_token
    total = WARMUP * 2 + CYCLES * ROUNDS * 2 + PROFILED * 2
    for _ in range(total):
        TaskFactory(project=project)
    handlers = {"full": WSGIHandler(), "lean": LeanWSGIHandler()}
    for app in handlers.values():
        for _ in range(WARMUP):
            _cycle(app, token, project.slug)
    spent: dict[str, list[float]] = {name: [] for name in handlers}
    for _ in range(ROUNDS):
        for name, app in handlers.items():
            began = time.process_time()
            for _ in range(CYCLES):
                _cycle(app, token, project.slug)
            spent[name].append((time.process_time() - began) / CYCLES * 1000)
    for name, values in spent.items():
        rounds = ", ".join(f"{value:.2f}" for value in values)
        print(f"{name}: {statistics.median(values):.2f} ms CPU per cycle (rounds: {rounds})")
    for name, app in handlers.items():
        profile = cProfile.Profile(time.process_time)
        profile.enable()
        for _ in range(PROFILED):
            _cycle(app, token, project.slug)
        profile.disable()
        _report(name, profile)


@pytest.mark.django_db(transaction=True)
def test_time_the_stack_alone(clock):
    """The handlers' own cost: a request the view refuses at its body (one authentication query), repeated."""
    project = ProjectFactory(slug="lean")
    token = AgentFactory(projects=[project]).api_token
    handlers = {"full": WSGIHandler(), "lean": LeanWSGIHandler()}
    spent: dict[str, list[float]] = {name: [] for name in handlers}
    for round_number in range(ROUNDS * 2 + 1):
        for name, app in handlers.items():
            began = time.process_time()
            for _ in range(200):
                status, _, _ = call(app, "POST", "/api/v1/claims/next/", {"colour": "red"}, token=token)
                assert status.startswith("400")
            if round_number:  # the first round warms up
                spent[name].append((time.process_time() - began) / 200 * 1000)
    for name, values in spent.items():
        rounds = ", ".join(f"{value:.3f}" for value in values)
        print(f"{name}: {statistics.median(values):.3f} ms CPU per refused request (rounds: {rounds})")


@pytest.mark.django_db(transaction=True)
def test_profile_the_keyed_cycle(clock):
    """The lean path's cycle without keys and with them: what an `Idempotency-Key` costs per cycle, profiled."""
    project = ProjectFactory(slug="lean")
    token = AgentFactory(projects=[project]).api_token
    for _ in range(WARMUP * 2 + CYCLES * ROUNDS * 2 + PROFILED):
        TaskFactory(project=project)
    app = LeanWSGIHandler()
    key = _key_maker()
    cycles: dict[str, Callable[[], None]] = {
        "unkeyed": lambda: _cycle(app, token, project.slug),
        "keyed": lambda: _cycle(app, token, project.slug, key),
    }
    for cycle in cycles.values():
        for _ in range(WARMUP):
            cycle()
    spent: dict[str, list[float]] = {name: [] for name in cycles}
    for _ in range(ROUNDS):
        for name, cycle in cycles.items():
            began = time.process_time()
            for _ in range(CYCLES):
                cycle()
            spent[name].append((time.process_time() - began) / CYCLES * 1000)
    for name, values in spent.items():
        rounds = ", ".join(f"{value:.2f}" for value in values)
        print(f"{name}: {statistics.median(values):.2f} ms CPU per cycle (rounds: {rounds})")
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    for _ in range(PROFILED):
        cycles["keyed"]()
    profile.disable()
    _report("keyed", profile)


@pytest.mark.django_db(transaction=True)
def test_profile_the_empty_claim(clock):
    """The fleet's most common request (SPEC §24's fleet row: most claims find nothing): claim-next on a
    project with nothing claimable, through the lean path; process CPU per request and a profile."""
    project = ProjectFactory(slug="lean")
    token = AgentFactory(projects=[project]).api_token
    app = LeanWSGIHandler()

    def empty() -> None:
        status, _, body = call(app, "POST", "/api/v1/claims/next/", {"project": project.slug}, token=token)
        assert status.startswith("204"), (status, body)

    _time_and_profile("empty", empty, per_round=CYCLES * 5, unit="request", warmup=WARMUP * 5, profiled=PROFILED * 5)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ready", [50, 6_000])
def test_profile_the_mcp_shaped_cycle(clock, ready):
    """The `mcp` bench's cycle through the lean path, with a few ready tasks and with the bench's 6,000: does
    the queue's size cost the web tier anything (stop 48 left the MCP path's requests dearer than the floor's)."""
    from bench.data import bulk_ready_tasks

    project = ProjectFactory(slug="lean")
    token = AgentFactory(projects=[project]).api_token
    bulk_ready_tasks(project, WARMUP + CYCLES * ROUNDS + PROFILED + ready, since=clock.now())
    app = LeanWSGIHandler()
    key = _key_maker()
    _time_and_profile(
        f"mcp-{ready}",
        lambda: _cycle(app, token, project.slug, key, renew=False),
        per_round=CYCLES,
        unit="cycle",
        warmup=WARMUP,
    )
