"""What `leasehold run` gives its command (SPEC §15.2): the context as Markdown, the environment, the placeholders.

- `context_markdown` renders the bounded work context the server sent (task,
  acceptance criteria, blockers, latest checkpoint, previous attempt,
  predecessor's work, review findings, decisions, comments, label, branch,
  worktree, environment, warnings, what was cut) for a prompt. Parts it does
  not know are rendered generically, so a server that grows the context is
  shown whole.
- `command_environment` adds `LEASEHOLD_*` variables, each only when it has
  a value, and never a token.
- `expand_placeholders` replaces `{context_file}`, `{task}`, `{branch}` and
  `{worktree}` in the command's arguments (only those four names: any other
  brace is left as it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.workspace.labels import git_trailer

PLACEHOLDERS = ("context_file", "task", "branch", "worktree")
# Keys of the context rendered by a section of their own; every other key gets a generic section.
_KNOWN = {
    "task",
    "blockers",
    "blockers_total",
    "latest_checkpoint",
    "previous_attempt",
    "predecessor_work",
    "git",
    "label",
    "environment",
    "warnings",
    "truncated",
}
# Resource names of an environment (SPEC §6) and the variable each becomes.
_RESOURCE_VARIABLES = {
    "database_url": "LEASEHOLD_ENV_DATABASE_URL",
    "container_name": "LEASEHOLD_ENV_CONTAINER",
    "host_path": "LEASEHOLD_ENV_HOST_PATH",
    "rate_limit_key": "LEASEHOLD_ENV_RATE_LIMIT_KEY",
}


def _title(name: str) -> str:
    return name.replace("_", " ").capitalize()


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _generic(value: Any, indent: str = "") -> list[str]:
    """Any JSON value as Markdown bullets (dicts by key, lists by item); nulls and empties are left out."""
    if isinstance(value, Mapping):
        lines: list[str] = []
        for key, item in value.items():
            if item in (None, "", [], {}):
                continue
            if isinstance(item, Mapping | list):
                lines.append(f"{indent}- {_title(str(key))}:")
                lines += _generic(item, indent + "  ")
            else:
                lines.append(f"{indent}- {_title(str(key))}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, Mapping):
                inner = _generic(item, indent + "  ")
                if inner:
                    lines.append(f"{indent}- " + inner[0].lstrip()[2:])
                    lines += inner[1:]
            elif isinstance(item, list):
                lines += _generic(item, indent + "  ")
            elif item not in (None, ""):
                lines.append(f"{indent}- {_scalar(item)}")
        return lines
    return [] if value in (None, "") else [f"{indent}{_scalar(value)}"]


def _steps(steps: Any) -> list[str]:
    return ["", "Next steps:", *(f"- {step}" for step in steps)] if steps else []


def context_markdown(context: Mapping[str, Any], *, where: Mapping[str, Any] | None = None) -> str:
    """The context as a Markdown document; `where` adds what the run knows (branch, worktree, base commit)."""
    facts = context.get("git") or {}
    where = {
        "branch": facts.get("branch"),
        "worktree": facts.get("worktree_path"),
        "base_commit": facts.get("base_commit"),
        **{name: value for name, value in (where or {}).items() if value},
    }
    task = context.get("task") or {}
    status = task.get("effective_status") or task.get("status")
    lines = [f"# {task.get('key', '?')}: {task.get('title', '')}", ""]
    facts = [f"status {status}" if status else "", f"priority {task.get('priority')}" if "priority" in task else ""]
    facts += [f"class {task['task_class']}" if task.get("task_class") else ""]
    facts += [f"epoch {task['epoch']}" if task.get("epoch") is not None else ""]
    lines.append("Task: " + ", ".join(fact for fact in facts if fact) + ".")
    label = context.get("label") or where.get("label")
    if label:
        lines.append(f"Label: `{label}` (commits made in the worktree get the trailer `{git_trailer(label)}`).")
    for name, text in (("branch", "Branch"), ("worktree", "Worktree"), ("base_commit", "Base commit")):
        if where.get(name):
            lines.append(f"{text}: `{where[name]}`")
    for name, text in (("description", "Description"), ("acceptance_criteria", "Acceptance criteria")):
        if task.get(name):
            lines += ["", f"## {text}", "", str(task[name]).rstrip()]
    other_task = {key: value for key, value in task.items() if key not in _TASK_SHOWN}
    if any(value not in (None, "", [], {}) for value in other_task.values()):
        lines += ["", "## More about the task", "", *_generic(other_task)]
    blockers = context.get("blockers") or []
    if blockers:
        total = context.get("blockers_total") or len(blockers)
        lines += ["", f"## Unresolved blockers ({len(blockers)} of {total})", ""]
        lines += [_blocker_line(blocker) for blocker in blockers]
    checkpoint = context.get("latest_checkpoint")
    if checkpoint:
        by = f" (attempt {checkpoint.get('attempt')} by {checkpoint.get('agent')}, {checkpoint.get('created_at')})"
        lines += ["", "## Latest checkpoint" + by, "", str(checkpoint.get("content", "")).rstrip()]
        lines += _steps(checkpoint.get("next_steps"))
    lines += _previous(context.get("previous_attempt"))
    lines += _predecessor(context.get("predecessor_work"))
    for key, value in context.items():
        if key not in _KNOWN and value not in (None, "", [], {}):
            lines += ["", f"## {_title(key)}", "", *_generic(value)]
    environment = context.get("environment")
    if environment:
        lines += ["", f"## Environment {environment.get('name', '')}".rstrip(), "", *_generic(environment)]
    warnings = context.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", "", *(f"- {warning}" for warning in warnings)]
    truncated = context.get("truncated") or []
    if truncated:
        lines += ["", "## Cut to fit", "", "These parts were shortened: " + ", ".join(f"`{p}`" for p in truncated)]
        key = task.get("key", "KEY")
        lines.append(f"Read the rest with `leasehold task show {key} --field description --offset N`.")
    return "\n".join(lines).rstrip() + "\n"


_TASK_SHOWN = {"key", "title", "status", "effective_status", "priority", "task_class", "epoch", "version"}
_TASK_SHOWN |= {"description", "acceptance_criteria"}


def _previous(previous: Mapping[str, Any] | None) -> list[str]:
    if not previous:
        return []
    heading = f"## Previous attempt {previous.get('id', '')} ({previous.get('status')}, {previous.get('agent')})"
    lines = ["", heading, ""]
    summary = str(previous.get("result_summary") or "").strip()
    lines.append(summary or "(no summary was written)")
    for name in ("failure_reason_code", "interruption_reason_code", "branch", "base_commit"):
        if previous.get(name):
            lines.append(f"- {_title(name)}: {previous[name]}")
    return lines + _steps(previous.get("next_steps"))


def _predecessor(work: Mapping[str, Any] | None) -> list[str]:
    if not work:
        return []
    lines = ["", f"## Where the predecessor's work is (attempt {work.get('attempt')}, {work.get('status')})", ""]
    for name, text in (("branch", "Branch"), ("head_commit", "Head"), ("base_commit", "Base")):
        if work.get(name):
            lines.append(f"- {text}: `{work[name]}`")
    if work.get("commits_ahead") is not None:
        lines.append(f"- Commits ahead of the base: {work['commits_ahead']}")
    if work.get("pushed") is not None:
        lines.append("- Pushed: " + ("yes" if work["pushed"] else "no (only on its machine)"))
    if work.get("dirty") is not None:
        lines.append("- Uncommitted changes left: " + _scalar(work["dirty"]))
    for name, text in (("host", "Host"), ("worktree_path", "Worktree"), ("agent", "Agent")):
        if work.get(name):
            lines.append(f"- {text}: {work[name]}")
    shown = {"attempt", "status", "branch", "head_commit", "base_commit", "commits_ahead", "pushed", "dirty"}
    rest = {key: value for key, value in work.items() if key not in shown | {"host", "worktree_path", "agent"}}
    return lines + _generic(rest)


def command_environment(
    *,
    task: str,
    attempt_id: int,
    epoch: int,
    label: str | None,
    branch: str | None,
    base_commit: str | None,
    worktree: str | None,
    environment: Mapping[str, Any] | None,
) -> dict[str, str]:
    """The `LEASEHOLD_*` variables of §15.2 that have a value (never a token)."""
    variables = {
        "LEASEHOLD_TASK": task,
        "LEASEHOLD_ATTEMPT_ID": str(attempt_id),
        "LEASEHOLD_EPOCH": str(epoch),
        "LEASEHOLD_LABEL": label,
        "LEASEHOLD_BRANCH": branch,
        "LEASEHOLD_BASE_COMMIT": base_commit,
        "LEASEHOLD_WORKTREE": worktree,
    }
    if environment:
        resources = environment.get("resources") or {}
        variables["LEASEHOLD_ENV_NAME"] = environment.get("name")
        for name, variable in _RESOURCE_VARIABLES.items():
            value = resources.get(name)
            variables[variable] = str(value) if value not in (None, "") else None
        ports = [str(port) for port in resources.get("ports") or []]
        variables["LEASEHOLD_ENV_PORTS"] = ",".join(ports) or None
        variables["LEASEHOLD_ENV_PORT"] = ports[0] if ports else None
    return {name: value for name, value in variables.items() if value}


def expand_placeholders(arguments: list[str], values: Mapping[str, str | None]) -> list[str]:
    """Replace `{context_file}`, `{task}`, `{branch}`, `{worktree}` in each argument (an unknown value: empty)."""
    expanded = []
    for argument in arguments:
        for name in PLACEHOLDERS:
            argument = argument.replace("{" + name + "}", values.get(name) or "")
        expanded.append(argument)
    return expanded


def _blocker_line(blocker: dict[str, Any]) -> str:
    """A blocker by key and title; another project's (a stub, SPEC §22) by key and effective status only."""
    if blocker.get("stub"):
        return f"- {blocker.get('key')} (another project): {blocker.get('effective_status')}"
    return f"- {blocker.get('key')}: {blocker.get('title', '')}"
