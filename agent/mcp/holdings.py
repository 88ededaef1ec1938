"""The leases `leasehold mcp` holds, kept in the agent's state files (SPEC §15.3).

- Every attempt the server claims is written to its state file
  (`agent.workspace.state`, owner `mcp`, this process's pid) and its expiry is kept
  fresh as the keeper renews, so the CLI in a shell beside the client sees
  and acts on the same attempt.
- On start it takes back the live attempts of its agent that an earlier
  `leasehold mcp` held (owner `mcp`, that process gone): a restarted server
  keeps its tasks. A claim of a task it already holds answers the held
  attempt instead of asking the server (which would answer `TASK_TAKEN` by
  itself); an attempt on that task in a state file whose owner process is
  gone (a shell `leasehold claim`, a dead server) is taken over the same way.
  A taken-back attempt is renewed once at once: an attempt the server no
  longer holds is dropped, never written with again.
- When the client session ends cleanly, `hand_off_all` finishes each attempt
  still held as `handoff` (`client_shutdown`); with `--keep-on-exit` the
  attempts stay in their state files for the next server to take back.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from agent.client.api import LeaseholdClient
from agent.client.errors import LeaseholdError
from agent.client.keeper import ENDING_CODES, LeaseKeeper
from agent.client.models import Claim
from agent.workspace import state
from agent.workspace.config import Settings, config_dir
from agent.workspace.session import agent_handle, hold_claim
from agent.workspace.state import HeldAttempt, process_alive

OWNER = "mcp"
HANDOFF_SUMMARY = "The MCP client session ended; leasehold mcp handed the attempt off."


def compact(value: Any) -> Any:
    """Drop null fields (recursively): they cost tokens and say nothing."""
    if isinstance(value, dict):
        return {key: compact(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [compact(item) for item in value]
    return value


class Holdings:
    """The attempts this server holds, by attempt id; the latest claimed is the default for holder tools."""

    def __init__(
        self,
        client: LeaseholdClient,
        settings: Settings,
        *,
        project: str | None,
        keep_alive: bool,
        directory: Path | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.project = project
        self.keep_alive = keep_alive
        self.directory = directory or config_dir()
        self.keepers: dict[int, LeaseKeeper] = {}
        self.records: dict[int, HeldAttempt] = {}
        self.current: int | None = None
        self._agent: str | None = None
        self._taken_back = False
        self._lock = threading.RLock()

    # --- who and what -----------------------------------------------------------------

    @property
    def agent(self) -> str:
        if self._agent is None:
            self._agent = agent_handle(self.settings, self.client)
        return self._agent

    @property
    def known_agent(self) -> str | None:
        """The agent handle if already learnt (never asks the server)."""
        return self._agent

    def project_or(self, project: str | None) -> str:
        chosen = project or self.project
        if not chosen:
            raise LeaseholdError("Name the project (no default project is set).", code="VALIDATION_ERROR")
        return chosen

    def _takeable(self, held: HeldAttempt, *, any_owner: bool) -> bool:
        """Ours to take: this server, not lost, and nobody alive keeps it (any owner, or only a dead `mcp`)."""
        if held.server != self.client.url or held.lost or held.attempt_id in self.keepers:
            return False
        if not any_owner and held.owner != OWNER:
            return False
        return not process_alive(held.pid) or held.pid == os.getpid()

    # --- taking attempts ----------------------------------------------------------------

    def take_back(self) -> list[HeldAttempt]:
        """Take back the attempts an earlier `leasehold mcp` of this agent held (once; retried until it works)."""
        with self._lock:
            if self._taken_back:
                return []
            taken = [
                held
                for held in state.held_by(self.directory, self.agent)
                if self._takeable(held, any_owner=False) and self._adopt(held)
            ]
            self._taken_back = True
            return taken

    def _adopt(self, held: HeldAttempt) -> bool:
        """Keep `held`, after one renewal proves the server still holds it for us; False when it does not."""
        held = held.replace(owner=OWNER, pid=os.getpid())
        keeper = self._keeper_for(held)
        try:
            renewed = keeper.renew()
        except LeaseholdError as error:
            if error.code in ENDING_CODES or keeper.lost.is_set():
                state.remove(self.directory, held.agent, held.task, attempt_id=held.attempt_id)
                return False
            # No answer: keep it; the keeper's renewals decide.
        else:
            held.lease_expires_at = renewed["lease_expires_at"]
        state.save(self.directory, held)
        self._start(held, keeper)
        return True

    def hold(self, claim: Claim) -> dict[str, Any]:
        """Keep a fresh claim: its state file, its keeper; the answer the model sees (no token)."""
        held = hold_claim(claim, self.client, self.settings, owner=OWNER)
        with self._lock:
            self._agent = self._agent or held.agent
            self._start(held, self._keeper_for(held))
        return compact({**claim.summary(), "kept_alive": self.keep_alive, "context": claim.context})

    def held_on(self, key: str) -> HeldAttempt | None:
        """The attempt on task `key` this server holds, or one it can take over from a state file."""
        with self._lock:
            for attempt_id, held in self.records.items():
                if held.task == key and self.keepers[attempt_id].held:
                    self.current = attempt_id
                    return held
            on_file = state.load(self.directory, self.agent, key)
            if on_file is not None and self._takeable(on_file, any_owner=True) and self._adopt(on_file):
                return self.records[on_file.attempt_id]
        return None

    def answer_held(self, held: HeldAttempt) -> dict[str, Any]:
        """What a claim of a task already held answers: that attempt and a fresh context."""
        summary = {
            "task": held.task,
            "attempt": held.attempt_id,
            "epoch": held.epoch,
            "lease_expires_at": self.keepers[held.attempt_id].lease_expires_at,
            "renew_every_seconds": held.renew_every_seconds,
            "branch": held.branch,
            "label": held.label,
            "already_held": True,
            "kept_alive": self.keep_alive,
        }
        return compact({**summary, "context": self.client.context(held.task)})

    def _keeper_for(self, held: HeldAttempt) -> LeaseKeeper:
        # The server's one client (its keep-alive connection): a client per lease cost a TLS context and a fresh
        # connection per claim. Renewals in the background share it safely (a call finding it busy opens another).
        return LeaseKeeper(
            self.client,
            held.lease,
            on_lost=lambda reason: self._lost(held, reason),
            on_renewed=lambda expires: self._renewed(held, expires),
        )

    def _start(self, held: HeldAttempt, keeper: LeaseKeeper) -> None:
        with self._lock:
            self.keepers[held.attempt_id] = keeper
            self.records[held.attempt_id] = held
            self.current = held.attempt_id
        if self.keep_alive:
            keeper.start()

    # --- keeping them -------------------------------------------------------------------

    def _renewed(self, held: HeldAttempt, expires: str) -> None:
        """Keep the state file's expiry fresh: the CLI judges a live attempt by it."""
        with self._lock:
            if self.records.get(held.attempt_id) is not held:
                return
            held.lease_expires_at = expires
            state.save(self.directory, held)

    def touched(self, keeper: LeaseKeeper) -> None:
        """After a holder tool: the lease may have moved; written to the state file without background renewals.

        With them (the default) the keeper's renewals keep the file's expiry at most one renewal interval behind,
        never past while they work, and a holder call only moves the lease further: the CLI still judges the
        attempt live. Writing the file (an fsync) after every note was a fifth of a tool call's CPU.
        """
        if self.keep_alive:
            return
        held = self.records.get(keeper.lease.attempt_id)
        if held is not None and keeper.held and keeper.lease_expires_at != held.lease_expires_at:
            self._renewed(held, str(keeper.lease_expires_at))

    def _lost(self, held: HeldAttempt, reason: str) -> None:
        keeper = self.keepers.get(held.attempt_id)
        if keeper is not None and keeper.budget_exhausted:
            return  # SPEC §19: the work is over, but the token still finishes or releases the attempt
        # The token is dead: drop its state file (if it is still this attempt's) so nothing sends it again.
        state.remove(self.directory, held.agent, held.task, attempt_id=held.attempt_id)

    def keeper(self, attempt: int | None) -> LeaseKeeper:
        """The keeper of `attempt`, else of the current attempt; a lone attempt of a state file is taken over."""
        with self._lock:
            if attempt is not None:
                chosen = self.keepers.get(attempt)
            elif self.current is not None:
                chosen = self.keepers.get(self.current)
            else:
                live = [keeper for keeper in self.keepers.values() if keeper.held]
                chosen = live[0] if len(live) == 1 else None
                if len(live) > 1:
                    ids = ", ".join(f"{keeper.lease.attempt_id} ({keeper.lease.task})" for keeper in live)
                    raise LeaseholdError(f"Several attempts are held ({ids}): pass attempt.", code="NO_ATTEMPT")
                if chosen is None:
                    chosen = self._from_state_files()
        if chosen is None:
            raise LeaseholdError(
                "No lease held here" + (f" for attempt {attempt}" if attempt is not None else "") + ": claim first.",
                code="NO_ATTEMPT",
            )
        return chosen

    def _from_state_files(self) -> LeaseKeeper | None:
        """The CLI's current attempt (a shell `leasehold claim` beside the client), taken over."""
        try:
            found = state.current(self.directory, self.agent, Path.cwd())
        except state.AmbiguousAttempt:
            return None
        if found is None or not self._takeable(found, any_owner=True) or not self._adopt(found):
            return None
        return self.keepers[found.attempt_id]

    def ended(self, keeper: LeaseKeeper) -> None:
        """The attempt was finished or released: forget it, and its state file."""
        with self._lock:
            held = self.records.pop(keeper.lease.attempt_id, None)
            self.keepers.pop(keeper.lease.attempt_id, None)
            if self.current == keeper.lease.attempt_id:
                self.current = None
        if held is not None:
            state.remove(self.directory, held.agent, held.task, attempt_id=held.attempt_id)

    # --- the end of the session ---------------------------------------------------------

    def hand_off_all(self) -> list[int]:
        """Finish every attempt still held as `handoff` (`client_shutdown`); the ids handed off."""
        done = []
        for keeper in list(self.keepers.values()):
            if not keeper.held and not (keeper.budget_exhausted and not keeper.ended):
                continue
            try:
                keeper.finish("handoff", result_summary=HANDOFF_SUMMARY, interruption_reason_code="client_shutdown")
            except LeaseholdError as error:
                print(f"leasehold mcp: could not hand off {keeper.lease.task}: {error}", file=sys.stderr)
                continue
            self.ended(keeper)
            done.append(keeper.lease.attempt_id)
        return done

    def stop(self) -> None:
        """Stop renewing; the state files stay (`--keep-on-exit`, or a crash): the next server takes them back."""
        with self._lock:
            keepers = list(self.keepers.values())
        for keeper in keepers:
            keeper.stop()
