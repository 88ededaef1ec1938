"""Exit codes and output of the `leasehold` CLI: human text by default, one JSON document with `--json`."""

from __future__ import annotations

import sys
from typing import Any

from agent.client.errors import LEASE_LOSS_CODES, LeaseholdError
from agent.client.text import compact_json, error_text

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOTHING_CLAIMABLE = 3
EXIT_TASK_TAKEN = 4
EXIT_LEASE_LOST = 5
EXIT_AUTH = 6
EXIT_COMMAND_FAILED = 7
EXIT_LANDING_FAILED = 7  # land: the landing ended conflict, check_failed or target_moved
EXIT_WORKSPACE = 8
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE, as for any command whose reader quit early

EXIT_CODES_HELP = """\
exit codes:
  0    ok
  1    error (server or connection trouble, any other API error)
  2    usage (bad arguments; no current attempt for a holder command)
  3    nothing claimable (claim --next found nothing; TASK_NOT_CLAIMABLE);
       with --until-empty: the project's work is finished; land: nothing
       to land
  4    task taken (TASK_TAKEN: another agent holds it; PATHS_RESERVED: its
       paths)
  5    lease lost (LEASE_EXPIRED, LEASE_NOT_HELD, STALE_EPOCH,
       INVALID_LEASE_TOKEN, or the keeper gave up) or BUDGET_EXHAUSTED: stop
       working on the task
  6    authentication (not logged in, AUTHENTICATION_FAILED, PERMISSION_DENIED)
  7    run: the command exited non-zero; the attempt was finished `failed`;
       land: the landing failed (conflict, red check, moved target)
  8    workspace: not a git repository, the branch is checked out by a live
       attempt or the main checkout, DIR is not empty, git failed; nothing
       was changed (a fresh claim is handed back)
  128+N  run: interrupted by signal N (130 SIGINT, 143 SIGTERM); the attempt
       was handed off
  141  stdout was closed early (a pipe's reader quit, e.g. `| head`)
"""


def exit_code_for(error: LeaseholdError) -> int:
    if error.code in LEASE_LOSS_CODES or error.code == "LEASE_LOST":
        return EXIT_LEASE_LOST
    if error.code in ("TASK_TAKEN", "PATHS_RESERVED"):
        return EXIT_TASK_TAKEN
    if error.code == "BUDGET_EXHAUSTED":
        return EXIT_LEASE_LOST
    if error.code == "TASK_NOT_CLAIMABLE":
        return EXIT_NOTHING_CLAIMABLE
    if error.code in ("AUTHENTICATION_FAILED", "PERMISSION_DENIED"):
        return EXIT_AUTH
    return EXIT_ERROR


class Output:
    """Writes results to stdout and diagnostics to stderr; with `--json`, results are one JSON document."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json

    def result(self, data: Any, human: str) -> None:
        if self.as_json:
            print(compact_json(data), flush=True)
        elif human:
            print(human, flush=True)

    def info(self, text: str) -> None:
        """Progress for humans, on stderr (never mixed into a command's stdout)."""
        if not self.as_json:
            print(f"leasehold: {text}", file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        """A one-line warning on stderr, also with `--json` (stdout keeps its one JSON document)."""
        print(f"leasehold: warning: {text}", file=sys.stderr, flush=True)

    def error(self, code: str, message: str, *, details: dict[str, Any] | None = None) -> None:
        if self.as_json:
            print(compact_json({"error": {"code": code, "message": message, "details": details or {}}}), flush=True)
        else:
            print(f"leasehold: error: {code}: {message}", file=sys.stderr, flush=True)

    def failure(self, error: LeaseholdError) -> int:
        self.error(error.code, error_text(error), details=error.details)
        return exit_code_for(error)
