"""The daemon's heartbeat carries only the slots whose report changed since the last answered beat (SPEC §24)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agent.client.errors import LeaseholdError
from agent.runner.daemon import Runner


class FakeApi:
    def __init__(self) -> None:
        self.bodies: list[list[dict[str, Any]]] = []
        self.fail_next = False

    def request(self, method: str, path: str, *, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/runners/heartbeat/")
        self.bodies.append(body["slots"])
        if self.fail_next:
            self.fail_next = False
            raise LeaseholdError("the server is away", code="CONNECTION_FAILED")
        return {"cordoned": False, "draining": False, "cancel": [], "heartbeat_seconds": 15}


class FakeSlot:
    def __init__(self, number: int) -> None:
        self.number, self.state = number, "idle"

    def report(self) -> dict[str, Any]:
        return {"number": self.number, "state": self.state, "attempt_id": None, "task": None}


def _runner(slots: list[FakeSlot]) -> Runner:
    runner = Runner(SimpleNamespace(providers={}), log=SimpleNamespace(event=lambda *a, **k: None))
    runner.slots = slots  # type: ignore[assignment]
    return runner


def test_every_slot_first_then_only_changes_and_every_slot_again_after_a_failed_beat():
    slots = [FakeSlot(1), FakeSlot(2)]
    runner, api = _runner(slots), FakeApi()
    runner._beat(api)
    runner._beat(api)
    slots[1].state = "working"
    runner._beat(api)
    api.fail_next = True
    runner._beat(api)
    runner._beat(api)
    assert [[report["number"] for report in body] for body in api.bodies] == [[1, 2], [], [2], [], [1, 2]]
    assert api.bodies[2][0]["state"] == "working"
