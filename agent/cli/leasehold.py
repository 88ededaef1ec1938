"""`leasehold`: the agent's command line (SPEC §13).

`login` stores the server URL and the agent token (mode 0600, see
`agent.workspace.config`). `claim` stores the attempt it gets in the state file, so
`note`, `checkpoint`, `renew`, `finish` and `release` in the same shell act on
it. `run -- COMMAND…` holds a lease while COMMAND runs (`agent.cli.run`).
`mcp` serves the same operations to MCP clients (`agent.mcp.server`);
`connect` writes a client's configuration for it and `hook` is what Claude
Code's hooks run. `task`, `git`, `block` and `unblock` reach the rest of what
an agent needs (`agent.cli.task_commands`).

This module reads the command line and maps errors to exit codes; what each
command does is in `agent.cli.commands` (the parsers of the lease's own
commands: `agent.cli.lease_parsers`). A call builds only its own command's
parser and imports only its module (`--help` builds them all). Results go to stdout (one JSON document
with `--json`), diagnostics to stderr. Exit codes:
`agent.cli.output.EXIT_CODES_HELP`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from agent import __version__
from agent.cli.lease_parsers import LEASE_COMMANDS, Command
from agent.cli.output import (
    EXIT_AUTH,
    EXIT_CODES_HELP,
    EXIT_NOTHING_CLAIMABLE,
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
    EXIT_WORKSPACE,
    Output,
)
from agent.client.errors import LeaseholdError
from agent.workspace.config import NotLoggedIn
from agent.workspace.errors import WorkspaceError
from agent.workspace.session import UsageError


def _task_commands(command: Command) -> None:
    import agent.cli.task_commands as task_commands

    task_commands.add_parsers(command)


def _review_commands(command: Command) -> None:
    import agent.cli.review_commands as review_commands

    review_commands.add_parsers(command)


def _plan_commands(command: Command) -> None:
    import agent.cli.plan_commands as plan_commands

    plan_commands.add_parsers(command)


def _land_commands(command: Command) -> None:
    import agent.cli.land_commands as land_commands

    land_commands.add_parsers(command)


def _check_commands(command: Command) -> None:
    import agent.cli.check_commands as check_commands

    check_commands.add_parsers(command)


def _connect_command(command: Command) -> None:
    import agent.cli.connect as connect

    connect.add_parser(command)


def _hook_command(command: Command) -> None:
    import agent.cli.hooks as hooks

    hooks.add_parser(command)


def _runner_command(command: Command) -> None:
    import agent.cli.runner_command as runner_command

    runner_command.add_parser(command)


# A call builds the parser of its own command only, and imports only the module that runs it (issue 34,
# SPEC §24: a CLI call <= 150 ms of CPU): the commands beyond the lease, by what adds them (and their neighbours).
REACH_COMMANDS: dict[str, Callable[[Command], None]] = {
    "task": _task_commands,
    "git": _task_commands,
    "block": _task_commands,
    "unblock": _task_commands,
    "review": _review_commands,
    "decide": _review_commands,
    "comment": _review_commands,
    "plan": _plan_commands,
    "land": _land_commands,
    "landing": _land_commands,
    "check": _check_commands,
    "connect": _connect_command,
    "hook": _hook_command,
    "runner": _runner_command,
}
# Every command's name: the lease's own (`agent.cli.lease_parsers`), then the ones above, as `--help` lists them.
COMMANDS = (*LEASE_COMMANDS, *REACH_COMMANDS)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or (`only`) just the one a call runs, as the same sub-parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine output: one JSON document on stdout"
    )
    parser = argparse.ArgumentParser(
        prog="leasehold",
        description="Claim Leasehold tasks under a lease, keep it alive, leave checkpoints, finish.",
        epilog=EXIT_CODES_HELP + "\nconfiguration: LEASEHOLD_CONFIG (config file; attempts held live beside it), "
        "LEASEHOLD_URL / LEASEHOLD_TOKEN / LEASEHOLD_PROJECT (override the config file).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", default=False, help="machine output: one JSON document")
    parser.add_argument("--version", action="version", version=f"leasehold {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, text: str, handler: Callable[[argparse.Namespace, Output], int]) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return argparse.ArgumentParser(add_help=False)  # a module's other command: built, never reachable
        sub = commands.add_parser(
            name,
            help=text,
            description=text,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    for name, add in LEASE_COMMANDS.items():
        if only is None or only == name:
            add(command)
    added: list[Callable[[Command], None]] = []
    for name, add in REACH_COMMANDS.items():
        if (only is None or only == name) and add not in added:  # one call adds all of its module's commands
            added.append(add)
            add(command)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command `argv` names, when it is one: the first word that is not an option (the top level takes none
    with a value). None (build every command) for `--help`, `--version`, no command or an unknown one."""
    for arg in argv:
        if arg in ("-h", "--help", "--version", "--"):
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def _split_run_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """`leasehold … run … -- COMMAND…`: everything after the first `--` of a `run` is the command."""
    positional = [arg for arg in argv if not arg.startswith("-")]
    if positional[:1] == ["run"] and "--" in argv:
        split = argv.index("--")
        return argv[:split], argv[split + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    own, command = _split_run_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(_command_of(own))
    args = parser.parse_args(own)
    args.run_command = command
    out = Output(as_json=bool(args.json))
    handler: Callable[[argparse.Namespace, Output], int] = args.handler
    try:
        return handler(args, out)
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as exc:
        out.error("USAGE", str(exc))
        return EXIT_USAGE
    except WorkspaceError as exc:
        out.error("WORKSPACE", str(exc))
        return EXIT_WORKSPACE
    except NotLoggedIn as exc:
        out.error("NOT_LOGGED_IN", str(exc))  # the message names the config file
        return EXIT_AUTH
    except LeaseholdError as error:
        return out.failure(error)
    except KeyboardInterrupt:
        return 130


def _stdout_closed() -> int:
    """The reader of stdout went away (`leasehold changes | head`): no traceback, nothing more to say.

    stdout is pointed at /dev/null so that the interpreter's flush at exit
    does not raise the same error again.
    """
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_STDOUT_CLOSED


__all__ = ["EXIT_NOTHING_CLAIMABLE", "build_parser", "main"]
