"""Plans (SPEC §17): many tasks, their dependencies and decisions filed in one transaction, or none of them.

A plan names its tasks by `ref`, a name local to the plan; each `blocked_by`
entry is a ref of the same plan or the key of an existing task the caller can
see, of this project or another (SPEC §22); a decision's task is a ref or a
task of the plan's project. A ref never has the shape of a task key, so an entry is never
ambiguous. The whole plan is checked before anything is written
(`plan_check`): each task by the creation rules of `task_prepare`, each
decision by `decision_text_check`, refs well-formed, unique and known, at
most MAX_PLAN_TASKS tasks, MAX_PLAN_EDGES edges and MAX_PLAN_DECISIONS
decisions, and no cycle among the plan's tasks. An existing task cannot wait
for a task of the plan, so a cycle can only run through the plan's own tasks:
a plan's edge into another project never closes one there.
Every problem is reported at once, each with its path (`tasks[3].blocked_by[0]`)
and ref; a cycle is DEPENDENCY_CYCLE with its path in refs.

Applying (`plan_apply`) takes the plan's keys in one sequence bump
(`task_numbers_take`, the one key allocator), numbers the tasks in the order
the plan lists them, and writes the tasks, their dependencies and one
`task.created` event per task (the payload `task_create` writes) with one
INSERT each; decisions go through `decision_create`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.db import write_transaction
from core.errors import DependencyCycle, ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Task, TaskDependency, TaskStatus
from ledger.selectors import tasks_visible_to
from ledger.services.discussion import decision_create, decision_text_check
from ledger.services.events import events_append
from ledger.services.tasks import task_created_payload, task_numbers_take, task_prepare

MAX_PLAN_TASKS = 200
MAX_PLAN_EDGES = 500
MAX_PLAN_DECISIONS = 50
REF_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
TASK_KEY_SHAPE = re.compile(r"^[A-Z][A-Z0-9]{0,9}-[1-9][0-9]{0,8}$")
# What the error's details may hold of the problems (the envelope keeps details under 4 KB).
PROBLEMS_DETAIL_BYTES = 3000


@dataclass(frozen=True)
class PlannedTask:
    ref: str
    title: str
    description: str = ""
    acceptance_criteria: str = ""
    status: str = TaskStatus.OPEN
    priority: int = 0
    task_class: str = ""
    blocked_reason: str = ""
    blocked_by: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # SPEC §23.1: labels a claimer must carry


@dataclass(frozen=True)
class PlannedDecision:
    title: str
    body: str = ""
    task: str | None = None  # a ref of the plan or the key of an existing task


@dataclass(frozen=True)
class PlanProblem:
    path: str
    message: str
    ref: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ref": self.ref, "message": self.message}


@dataclass
class CheckedPlan:
    """A plan that passed every check: unsaved tasks in plan order, each one's blockers
    (an index into `tasks` or an existing task), and each decision's task (same)."""

    refs: list[str]
    tasks: list[Task]
    blockers: list[list[int | Task]]
    decisions: list[tuple[PlannedDecision, int | Task | None]] = field(default_factory=list)

    @property
    def edge_count(self) -> int:
        return sum(len(blockers) for blockers in self.blockers)


@dataclass(frozen=True)
class PlanResult:
    keys: dict[str, str]
    created: int
    edges: int
    decisions: list[int]


def plan_refused(problems: Sequence[PlanProblem]) -> ValidationFailed:
    """VALIDATION_ERROR naming every problem (as many as fit the details), the first in the message."""
    shown: list[dict[str, Any]] = []
    for problem in problems:
        item = problem.as_dict()
        if len(json.dumps([*shown, item], default=str)) > PROBLEMS_DETAIL_BYTES:
            break
        shown.append(item)
    first = problems[0]
    where = f"{first.path} (ref {first.ref})" if first.ref else first.path
    count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
    return ValidationFailed(
        f"The plan is not valid ({count}); {where}: {first.message}",
        details={"errors": shown, "error_count": len(problems), "truncated": len(shown) < len(problems)},
    )


def _problems_of(error: ValidationFailed, *, path: str, ref: str | None) -> list[PlanProblem]:
    fields = error.details.get("fields")
    if isinstance(fields, dict) and fields:
        return [
            PlanProblem(
                f"{path}.{name}",
                " ".join(str(m) for m in messages) if isinstance(messages, list) else str(messages),
                ref,
            )
            for name, messages in fields.items()
        ]
    return [PlanProblem(path, error.message, ref)]


def _ref_problems(tasks: Sequence[PlannedTask]) -> tuple[dict[str, int], list[PlanProblem]]:
    index_of: dict[str, int] = {}
    problems: list[PlanProblem] = []
    for i, task in enumerate(tasks):
        path = f"tasks[{i}].ref"
        if not isinstance(task.ref, str) or not REF_PATTERN.match(task.ref):
            problems.append(PlanProblem(path, "a ref is 1-64 letters, digits, '_', '.', ':' or '-'", str(task.ref)))
        elif TASK_KEY_SHAPE.match(task.ref):
            problems.append(PlanProblem(path, "a ref must not look like a task key (e.g. WEB-12)", task.ref))
        elif task.ref in index_of:
            problems.append(PlanProblem(path, f"duplicate ref; tasks[{index_of[task.ref]}] has it", task.ref))
        else:
            index_of[task.ref] = i
    return index_of, problems


def _limit_problems(tasks: Sequence[PlannedTask], decisions: Sequence[PlannedDecision]) -> list[PlanProblem]:
    problems = []
    if not tasks:
        problems.append(PlanProblem("tasks", "a plan has at least one task"))
    if len(tasks) > MAX_PLAN_TASKS:
        problems.append(PlanProblem("tasks", f"{len(tasks)} tasks; a plan has at most {MAX_PLAN_TASKS}"))
    edges = sum(len(task.blocked_by) for task in tasks)
    if edges > MAX_PLAN_EDGES:
        problems.append(PlanProblem("tasks[].blocked_by", f"{edges} edges; a plan has at most {MAX_PLAN_EDGES}"))
    if len(decisions) > MAX_PLAN_DECISIONS:
        problems.append(
            PlanProblem("decisions", f"{len(decisions)} decisions; a plan has at most {MAX_PLAN_DECISIONS}")
        )
    return problems


def plan_check(
    *,
    project: Project,
    tasks: Sequence[PlannedTask],
    decisions: Sequence[PlannedDecision] = (),
    now: datetime | None = None,
    agent: Agent | None = None,
) -> CheckedPlan:
    """The plan checked whole, writing nothing (a dry run is this); VALIDATION_ERROR or DEPENDENCY_CYCLE otherwise.

    Reads one statement: the existing tasks the plan names by key, of any project `agent` is an
    agent of (every project for `agent=None`, a user or the system).
    """
    problems = _limit_problems(tasks, decisions)
    if problems:
        raise plan_refused(problems)
    now = now or clock.now()
    index_of, problems = _ref_problems(tasks)
    prepared: list[Task] = []
    for i, planned in enumerate(tasks):
        try:
            prepared.append(
                task_prepare(
                    project=project,
                    title=planned.title,
                    now=now,
                    description=planned.description,
                    acceptance_criteria=planned.acceptance_criteria,
                    status=planned.status,
                    priority=planned.priority,
                    task_class=planned.task_class,
                    requires=planned.requires,
                    blocked_reason=planned.blocked_reason,
                )
            )
        except ValidationFailed as error:
            problems.extend(_problems_of(error, path=f"tasks[{i}]", ref=planned.ref))

    named = {entry for planned in tasks for entry in planned.blocked_by} | {
        decision.task for decision in decisions if decision.task is not None
    }
    wanted = sorted(named - set(index_of))
    existing = {task.key: task for task in tasks_visible_to(agent).filter(key__in=wanted)} if wanted else {}

    def resolve(entry: str, *, path: str, ref: str | None, own_project: bool = False) -> int | Task | None:
        if entry in index_of:
            return index_of[entry]
        found = existing.get(entry)
        if found is not None and (found.project_id == project.pk or not own_project):
            return found
        where = f"a task of {project.slug}" if own_project else "a task you can see"
        problems.append(PlanProblem(path, f"{entry!r} is neither a ref of this plan nor {where}", ref))
        return None

    blockers: list[list[int | Task]] = []
    for i, planned in enumerate(tasks):
        resolved: dict[object, int | Task] = {}
        for j, entry in enumerate(planned.blocked_by):
            target = resolve(entry, path=f"tasks[{i}].blocked_by[{j}]", ref=planned.ref)
            if target is not None:
                resolved.setdefault(target if isinstance(target, int) else ("key", target.pk), target)
        blockers.append(list(resolved.values()))

    checked_decisions: list[tuple[PlannedDecision, int | Task | None]] = []
    for k, decision in enumerate(decisions):
        try:
            title, body = decision_text_check(title=decision.title, body=decision.body)
        except ValidationFailed as error:
            problems.extend(_problems_of(error, path=f"decisions[{k}]", ref=None))
            continue
        target = (
            resolve(decision.task, path=f"decisions[{k}].task", ref=None, own_project=True)
            if decision.task is not None
            else None
        )
        checked_decisions.append((PlannedDecision(title=title, body=body, task=decision.task), target))

    if problems:
        raise plan_refused(problems)
    refs = [planned.ref for planned in tasks]
    cycle = _cycle(blockers)
    if cycle is not None:
        path = [refs[i] for i in cycle]
        raise DependencyCycle(
            f"The plan's dependencies form a cycle: {' → '.join(path)}.",
            details={"path": path, "ref": path[0], "field": f"tasks[{cycle[0]}].blocked_by"},
        )
    return CheckedPlan(refs=refs, tasks=prepared, blockers=blockers, decisions=checked_decisions)


def _cycle(blockers: Sequence[Sequence[int | Task]]) -> list[int] | None:
    """A cycle among the plan's tasks along "blocked by" edges, as indices [a, b, …, a], or None."""
    on_path, done = 1, 2
    state = [0] * len(blockers)
    for start in range(len(blockers)):
        if state[start]:
            continue
        path = [start]
        pending = [iter([b for b in blockers[start] if isinstance(b, int)])]
        state[start] = on_path
        while pending:
            following = next(pending[-1], None)
            if following is None:
                state[path.pop()] = done
                pending.pop()
                continue
            assert isinstance(following, int)
            if state[following] == on_path:
                return [*path[path.index(following) :], following]
            if state[following] == 0:
                state[following] = on_path
                path.append(following)
                pending.append(iter([b for b in blockers[following] if isinstance(b, int)]))
    return None


@write_transaction
def plan_apply(
    *, project: Project, tasks: Sequence[PlannedTask], actor: Actor, decisions: Sequence[PlannedDecision] = ()
) -> PlanResult:
    """File a whole plan: every task, dependency and decision, or nothing (one transaction, checked first).

    Keys are gap-free and in plan order: the plan takes its numbers in one
    bump of the project's sequence, so a concurrent creator's task comes
    before or after the whole plan, never in between.
    """
    now = clock.now()
    checked = plan_check(project=project, tasks=tasks, decisions=decisions, now=now, agent=actor.agent)
    for task, number in zip(checked.tasks, task_numbers_take(project, len(checked.tasks)), strict=True):
        task.number = number
        task.key = f"{project.key_prefix}-{number}"
    Task.objects.bulk_create(checked.tasks)

    def task_of(target: int | Task) -> Task:
        return checked.tasks[target] if isinstance(target, int) else target

    TaskDependency.objects.bulk_create(
        TaskDependency(task=task, blocked_by=task_of(target), created_at=now)
        for task, targets in zip(checked.tasks, checked.blockers, strict=True)
        for target in targets
    )
    events_append(
        type=EventType.TASK_CREATED,
        actor=actor,
        at=now,
        rows=[
            (task, task_created_payload(task, [task_of(target).key for target in targets]))
            for task, targets in zip(checked.tasks, checked.blockers, strict=True)
        ],
    )
    decision_ids = [
        decision_create(
            project=project,
            title=decision.title,
            body=decision.body,
            task=task_of(target) if target is not None else None,
            actor=actor,
        ).pk
        for decision, target in checked.decisions
    ]
    return PlanResult(
        keys={ref: task.key for ref, task in zip(checked.refs, checked.tasks, strict=True)},
        created=len(checked.tasks),
        edges=checked.edge_count,
        decisions=decision_ids,
    )
