"""Running a provider's `provision` or `teardown` command, and reading what `provision` printed (SPEC §23.3).

A command runs in its own process group with a deadline (`timeout_seconds`): past it the group gets SIGTERM,
then SIGKILL two seconds later. It dies with the runner (`PR_SET_PDEATHSIG`, Linux). Its environment is the
runner's without any `LEASEHOLD_*` variable (so never a token), plus the attempt's own names; the JSON of
the allocation comes on stdin.

`provision` prints one JSON object on stdout whose members are among `database_url` (a URL with a scheme and
no password: the server stores no secret), `ports` (TCP port numbers), `container` and `host_path` (an
absolute path); anything else is a `ProviderError`. The rules are the server's (`PUT
/attempts/{id}/environment/`), checked here first so that a bad answer never reaches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PROVISIONED_FIELDS = ("database_url", "ports", "container", "host_path")
DEFAULT_TIMEOUT_SECONDS = 300.0
KILL_GRACE_SECONDS = 2.0
STDERR_TAIL_CHARS = 2000
STDOUT_MAX_BYTES = 64 * 1024
PORTS_MAX_ITEMS = 32
# The server's rules (`leases.services.provisioning`): no control character anywhere, lengths, no password.
_TEXT = r"[^\u0000-\u001f\u007f]"
_DATABASE_URL = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]*://(?![^/?#]*:[^/?#]*@){_TEXT}*")
_CONTAINER = re.compile(rf"[^\s\u0000-\u001f\u007f\u0085]{_TEXT}*")
_HOST_PATH = re.compile(rf"/{_TEXT}*")
_TEXT_RULES = {
    "database_url": (_DATABASE_URL, 2000, "a URL with a scheme and without a password"),
    "container": (_CONTAINER, 200, "a name without control characters"),
    "host_path": (_HOST_PATH, 500, "an absolute path without control characters"),
}
PR_SET_PDEATHSIG = 1


class ProviderError(Exception):
    """A provider command failed: it exited non-zero, outlived its deadline, or printed something else than
    the JSON it owes. `stderr_tail` is the end of what it wrote on stderr."""

    def __init__(self, message: str, *, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail


def command_argv(value: Any, *, where: str) -> list[str]:
    """A config's command: an argv list of strings, or one string split as a shell would (`shlex`)."""
    if isinstance(value, str) and value.strip():
        return shlex.split(value)
    if isinstance(value, list) and value and all(isinstance(part, str) and part for part in value):
        return list(value)
    raise ValueError(f"{where} must be an executable path or a non-empty list of arguments")


def provisioned_from(stdout: str) -> dict[str, Any]:
    """What `provision` printed, checked; a `ProviderError` names what is wrong."""
    try:
        answer = json.loads(stdout)
    except ValueError as error:
        raise ProviderError(f"provision printed no JSON object on stdout ({error})") from None
    if not isinstance(answer, dict):
        raise ProviderError("provision printed JSON that is not an object")
    unknown = sorted(str(name) for name in answer if name not in PROVISIONED_FIELDS)
    if unknown:
        raise ProviderError(
            f"provision printed unknown fields {', '.join(unknown)}; known are {', '.join(PROVISIONED_FIELDS)}"
        )
    values: dict[str, Any] = {}
    for name, value in answer.items():
        if value is None:
            continue
        if name == "ports":
            if not isinstance(value, list) or len(value) > PORTS_MAX_ITEMS:
                raise ProviderError(f"provision's ports must be a list of at most {PORTS_MAX_ITEMS} port numbers")
            if any(isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535 for port in value):
                raise ProviderError("provision's ports must be TCP port numbers (1-65535)")
            values[name] = list(value)
            continue
        pattern, max_chars, requirement = _TEXT_RULES[name]
        if not isinstance(value, str) or not pattern.fullmatch(value) or len(value) > max_chars:
            raise ProviderError(f"provision's {name} must be {requirement}, at most {max_chars} characters")
        values[name] = value
    return values


@dataclass(frozen=True)
class Finished:
    stdout: str
    stderr_tail: str


def _dies_with_runner() -> Callable[[], None] | None:
    """A pre-exec hook that makes the child get SIGTERM when the runner dies (Linux); None elsewhere."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def in_the_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return in_the_child


def provider_environment(variables: Mapping[str, str]) -> dict[str, str]:
    """The runner's environment without `LEASEHOLD_*` (never a token, SPEC §23.2), plus `variables`."""
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("LEASEHOLD_")}
    return {**inherited, **variables}


def run_command(
    argv: list[str], *, stdin: Mapping[str, Any], variables: Mapping[str, str], timeout_seconds: float, what: str
) -> Finished:
    """Run a provider command to its end; a `ProviderError` when it cannot start, fails, or times out."""
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=provider_environment(variables),
            start_new_session=True,
            preexec_fn=_dies_with_runner(),  # only prctl runs between fork and exec
        )
    except OSError as error:
        raise ProviderError(f"{what} could not start: {error}") from None
    try:
        stdout, stderr = process.communicate(json.dumps(dict(stdin)).encode(), timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        stdout, stderr = _stop(process)
        raise ProviderError(
            f"{what} did not finish within {timeout_seconds:g} s and was killed", stderr_tail=_tail(stderr)
        ) from None
    if process.returncode != 0:
        raise ProviderError(f"{what} exited with status {process.returncode}", stderr_tail=_tail(stderr))
    if len(stdout) > STDOUT_MAX_BYTES:
        raise ProviderError(f"{what} printed more than {STDOUT_MAX_BYTES} bytes", stderr_tail=_tail(stderr))
    return Finished(stdout=stdout.decode("utf-8", errors="replace"), stderr_tail=_tail(stderr))


def _stop(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """SIGTERM to the command's whole group, SIGKILL after the grace; what it wrote."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sent)
        try:
            return process.communicate(timeout=KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            continue
    # The group is dead; something that left it (a daemon in a session of its own) still holds the pipes.
    process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    return b"", b""


def _tail(stderr: bytes) -> str:
    return stderr.decode("utf-8", errors="replace")[-STDERR_TAIL_CHARS:].strip()
