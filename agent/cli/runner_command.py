"""`leasehold runner [--config runner.toml]`: the runner daemon (SPEC §23.1, `agent.runner.daemon`).

Exit codes: 0 drained after SIGTERM/SIGINT, 2 the config (or the token file) cannot be used, 6 the server refused
the runner token (a refused registration is raised as the API's error and mapped like any command's).

`agent.runner` is imported inside the command only: the other commands do not pay for it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_USAGE, Output


def cmd_runner(args: argparse.Namespace, out: Output) -> int:
    from agent.runner.config import ConfigError, default_config_path, load_config
    from agent.runner.daemon import Runner
    from agent.runner.log import EventLog

    path = Path(args.config) if args.config else default_config_path()
    try:
        config = load_config(path)
        if args.check:
            out.result({"config": str(config.path), "ok": True}, f"{config.path}: ok")
            return 0
        return Runner(config, log=EventLog(as_json=out.as_json)).main()
    except ConfigError as error:
        out.error("CONFIG", str(error))
        return EXIT_USAGE


def add_parser(command: Any) -> None:
    """`runner`, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    runner = command(
        "runner",
        "Run the runner daemon: register, heartbeat, and loop each slot (claim with the server-side wait, then "
        "`run` the task's command in its worktree, or land); SIGTERM drains. Never exits on an empty queue.",
        cmd_runner,
    )
    runner.add_argument(
        "--config", help="the runner's TOML config (default: $LEASEHOLD_RUNNER_CONFIG, else ./runner.toml)"
    )
    runner.add_argument("--check", action="store_true", help="check the config and exit (0: it can be used)")
