"""`leasehold plan apply FILE.json|FILE.yaml [--dry-run]` (SPEC §17): a whole plan in one call.

The file holds what `POST /plans/` takes: `tasks` (each with a `ref`, a `title` and
`blocked_by`: refs of the plan or keys of existing tasks you can see, of this
project or another), optional `decisions`, and the
`project` (else `--project`, else the default set at login). `.json` files are read
as JSON, `.yaml` / `.yml` as YAML (safe loading: plain data only). The server
checks the whole plan and writes all of it or nothing; every problem it finds is
printed with its path and ref.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.cli.output import EXIT_OK, Output
from agent.workspace.config import load_settings
from agent.workspace.session import UsageError, make_client, project_from

PLAN_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


def read_plan(path: Path) -> dict[str, Any]:
    """The plan in `path`, parsed by its suffix; a UsageError naming what is wrong otherwise."""
    kind = PLAN_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UsageError(f"{path}: a plan file ends in .json, .yaml or .yml.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc}).") from None
    import yaml  # only a plan needs it: not every command should pay for importing it

    try:
        plan = json.loads(text) if kind == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: not valid {kind.upper()} ({str(exc)[:300]}).") from None
    if not isinstance(plan, dict):
        raise UsageError(f"{path}: a plan is an object with `tasks` (and optionally `project`, `decisions`).")
    return plan


def _counted(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def plan_text(answer: dict[str, Any], *, dry_run: bool) -> str:
    if dry_run:
        would = answer.get("would_create") or {}
        return (
            f"The plan is valid: it would create {_counted(would.get('tasks', 0), 'task', 'tasks')}, "
            f"{_counted(would.get('edges', 0), 'dependency', 'dependencies')} and "
            f"{_counted(would.get('decisions', 0), 'decision', 'decisions')}. Nothing was written."
        )
    keys = answer.get("keys") or {}
    created = _counted(answer.get("created", len(keys)), "task", "tasks")
    lines = [f"Created {created} ({_counted(answer.get('edges', 0), 'dependency', 'dependencies')}):"]
    lines += [f"  {ref} → {key}" for ref, key in keys.items()]
    if answer.get("decisions"):
        lines.append("Decision ids: " + ", ".join(str(decision) for decision in answer["decisions"]))
    return "\n".join(lines)


def cmd_plan_apply(args: argparse.Namespace, out: Output) -> int:
    plan = read_plan(Path(args.file))
    settings = load_settings()
    if "project" not in plan or args.project:
        plan["project"] = project_from(args, settings)
    with make_client(settings) as client:
        answer = client.apply_plan(plan, dry_run=args.dry_run, idempotency_key=args.idempotency_key)
    out.result(answer, plan_text(answer, dry_run=args.dry_run))
    return EXIT_OK


def add_parsers(command: Any) -> None:
    """`plan apply`, added through `agent.cli.leasehold`'s `command(name, text, handler)`."""
    plan = command("plan", "File a plan: many tasks, their dependencies and decisions, in one call.", None)
    actions = plan.add_subparsers(dest="plan_command", metavar="ACTION", required=True)
    apply = actions.add_parser("apply", help="apply a plan file (JSON or YAML): all of it or nothing")
    apply.set_defaults(handler=cmd_plan_apply)
    apply.add_argument("file", metavar="FILE", help="the plan: FILE.json, FILE.yaml or FILE.yml")
    apply.add_argument("--dry-run", action="store_true", help="check the plan on the server, write nothing")
    apply.add_argument("--project", help="project slug (default: the file's, else the one set at login)")
    apply.add_argument(
        "--idempotency-key", help="send this key: applying again with it answers the same keys, creating nothing"
    )
    apply.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")


__all__ = ["add_parsers", "cmd_plan_apply", "plan_text", "read_plan"]
