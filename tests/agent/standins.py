"""Stand-in executables (`claude`, `codex`, `make`, …) that record how `leasehold run` started them.

A stand-in writes one JSON line per call to `$STANDIN_LOG`: its name, argv,
working directory, full environment and the text of `$LEASEHOLD_CONTEXT_FILE`;
then it runs `$STANDIN_THEN` (a shell snippet, in its working directory) if
given, and exits with that snippet's status (0 without one).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.agent.gitrepos import IDENTITY

_STANDIN = """#!{python}
import json, os, subprocess, sys
from pathlib import Path
context = os.environ.get("LEASEHOLD_CONTEXT_FILE")
record = {{
    "name": Path(sys.argv[0]).name,
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "context": Path(context).read_text() if context and Path(context).exists() else None,
}}
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
then = os.environ.get("STANDIN_THEN")
sys.exit(subprocess.run(["/bin/sh", "-c", then]).returncode if then else 0)
"""


def install(bin_dir: Path, *names: str) -> Path:
    """Write stand-ins named `names` into `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = bin_dir / name
        path.write_text(_STANDIN.format(python=sys.executable))
        path.chmod(0o755)
    return bin_dir


def run_env(logged_in: dict[str, str], bin_dir: Path, log: Path, **extra: str) -> dict[str, str]:
    """A `leasehold` environment with the stand-ins and the real `leasehold` first on PATH, and a git identity."""
    env = {name: value for name, value in logged_in.items() if not name.startswith("GIT_")}
    env.update(IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["STANDIN_LOG"] = str(log)
    env.update(extra)
    return env


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
