"""Schemathesis hooks of `scripts/api-fuzz`: the rules the schema states in prose, kept by generated requests.

OpenAPI 3.0 cannot state a rule that joins a header and the body, one about values the API
handed out before, or one about what is stored, so the schema says these in descriptions:

- `PATCH /tasks/{key}/`: the version read, as `If-Match` or `expected_version` (they agree);
  the holder's proof, `X-Lease-Token`, `X-Lease-Epoch` and `X-Attempt-Id` (or `attempt_id`),
  whole or not at all; something to change besides those two body fields; and a `status`
  (or a blank `blocked_reason`) is accepted or not depending on the task's stored status;
- `POST /tasks/`: `blocked` needs a `blocked_reason`; `blocked_by` names existing tasks;
- `POST /tasks/{key}/dependencies/` (and `remove/`): both tasks exist and the edge closes no cycle;
- `POST /tasks/{key}/reservation/clear/`: the task exists (the fuzzer's own tasks are never reserved
  for another agent, so clearing answers the task);
- `POST /decisions/{id}/supersede/` is not fuzzed (see `scripts/api-fuzz`): `by` must be another
  active decision of the project, a state the fuzzer's own cases keep changing;
- `POST /plans/`: refs unique, each `blocked_by` entry an earlier ref of the plan or an existing
  key (no cycle), a `blocked` task with its reason, a decision's task an existing key;
- `GET /tasks/{key}/graph/`, `GET /projects/{slug}/graph/`: a task and project that exist;
- `cursor`: only a `next_cursor` the API answered;
- `Idempotency-Key`: unique per request (the same key with another request is IDEMPOTENCY_CONFLICT).

Requests generated from the schema alone break them at random. These hooks make every
positive request keep them, as a client that read the descriptions (and the task) would,
so a refusal of one means the API and its schema disagree. Negative requests are left as
generated: they are meant to be refused.
"""

from __future__ import annotations

import os
import re
from typing import Any

import requests
import schemathesis
from schemathesis import Case, GenerationMode, HookContext
from schemathesis.core.transport import Response
from schemathesis.generation.meta import TestPhase

HOLDER_HEADERS = ("X-Lease-Token", "X-Lease-Epoch", "X-Attempt-Id")
NOT_CHANGES = frozenset({"expected_version", "attempt_id"})
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")
# The first task `scripts/api-fuzz` creates in its project `fuzz`.
SEEDED_TASK = "FUZZ-1"
DEPENDENT_TASK = "FUZZ-2"
SEEDED_PROJECT = "fuzz"
# The projects with landing on whose delivered tasks `scripts/api-fuzz` seeds (SPEC §21).
LANDING_PROJECTS = 40
STATEFUL_LANDING_LEASE_SECONDS = 30
REVIEW_DECISIONS = frozenset({"approved", "changes_requested", "blocked"})


def _positive(case: Case) -> bool:
    return case.meta is not None and case.meta.generation.mode is GenerationMode.POSITIVE


def _body(case: Case) -> dict[str, Any]:
    return dict(case.body) if isinstance(case.body, dict) else {}


@schemathesis.hook("map_case")
def keep_the_rules_in_prose(context: HookContext, case: Case) -> Case:
    if not _positive(case):
        return case
    if case.query and "cursor" in case.query:
        case.query = {name: value for name, value in case.query.items() if name != "cursor"}
    operation_id = case.operation.definition.raw.get("operationId")
    if operation_id == "tasks_partial_update":
        _keep_the_task_update_rules(case)
    elif operation_id == "tasks_create":
        _keep_the_task_create_rules(case)
    elif operation_id == "attempts_finish":
        body = _body(case)
        # SPEC §16.1: a review decision (with findings) finishes a review attempt only, and most
        # attempts the fuzzer holds are work attempts: positive cases finish those as work (the
        # decisions are pinned by tests/api/test_reviews.py); findings belong to a decision.
        if body.get("outcome") in REVIEW_DECISIONS:
            body["outcome"] = "done"
        body.pop("findings", None)
        case.body = body
    elif operation_id in ("tasks_comments_create", "tasks_comments_list"):
        # SPEC §16.2: comments on the seeded task (a random key is only ever NOT_FOUND).
        case.path_parameters = {**(case.path_parameters or {}), "key": SEEDED_TASK}
    elif operation_id in ("decisions_create", "reviews_next"):
        # The fuzzer's one project; a decision about a task names the seeded one.
        body = {**_body(case), "project": SEEDED_PROJECT}
        if "task" in body:
            body["task"] = SEEDED_TASK
        case.body = body
    elif operation_id in ("tasks_dependencies_add", "tasks_dependencies_remove"):
        # The dependency names two tasks the fuzzer can see, and never a cycle: FUZZ-2 waits for FUZZ-1.
        case.path_parameters = {**(case.path_parameters or {}), "key": DEPENDENT_TASK}
        case.body = {**_body(case), "blocked_by": SEEDED_TASK}
    elif operation_id == "plans_apply":
        _keep_the_plan_rules(case)
    elif operation_id == "tasks_graph":
        case.path_parameters = {**(case.path_parameters or {}), "key": SEEDED_TASK}
    elif operation_id in ("projects_graph", "projects_read"):
        case.path_parameters = {**(case.path_parameters or {}), "slug": SEEDED_PROJECT}
    elif operation_id == "projects_landing":
        case.path_parameters = {**(case.path_parameters or {}), "slug": _landing_project(case)}
    elif operation_id == "landings_next":
        # SPEC §21.2: landings of a project with landing on (in `fuzz`, landing is off: VALIDATION_ERROR).
        body = {**_body(case), "project": _landing_project(case)}
        if case.meta is not None and case.meta.phase.name == TestPhase.STATEFUL:
            # A scenario that claims and never releases holds its target for the lease: a short one frees
            # the seeded targets for later scenarios (their renew and release steps follow at once).
            body["lease_seconds"] = STATEFUL_LANDING_LEASE_SECONDS
        case.body = body
    elif operation_id == "checks_report":
        case.body = {**_body(case), "project": SEEDED_PROJECT}
    elif operation_id == "tasks_checks" or operation_id == "tasks_reservation_clear":
        case.path_parameters = {**(case.path_parameters or {}), "key": SEEDED_TASK}
    elif operation_id == "tasks_claim" and not re.fullmatch(r"FUZZ-\d+", str((case.path_parameters or {}).get("key"))):
        # A generated key names no task (404 every time): claim one of the seeded ready targets
        # instead (FUZZ-3 to FUZZ-100; a taken one answers TASK_TAKEN, which is the API at work).
        target = 3 + sum(map(ord, case.id)) % 98
        case.path_parameters = {**(case.path_parameters or {}), "key": f"FUZZ-{target}"}
    return case


def _landing_project(case: Case) -> str:
    return f"fuzzland{sum(map(ord, case.id)) % LANDING_PROJECTS}"


def _keep_the_task_update_rules(case: Case) -> None:
    headers = case.headers
    body = _body(case)
    # One version: the header when both are there, the first version when neither is.
    if "If-Match" in headers:
        body.pop("expected_version", None)
    elif "expected_version" not in body:
        headers["If-Match"] = "1"
    # The holder's proof whole, or none of it (a plain write).
    holder = "X-Lease-Token" in headers or "X-Lease-Epoch" in headers or "attempt_id" in body
    whole = "X-Lease-Token" in headers and "X-Lease-Epoch" in headers
    if holder and whole and "X-Attempt-Id" in headers:
        body.pop("attempt_id", None)
    elif holder and not (whole and "attempt_id" in body):
        for name in HOLDER_HEADERS:
            headers.pop(name, None)
        body.pop("attempt_id", None)
    # Outside a stateful scenario the stored status is unknown, so changing it is a guess.
    if case.meta is not None and case.meta.phase.name != TestPhase.STATEFUL:
        body.pop("status", None)
        body.pop("blocked_reason", None)
    if not set(body) - NOT_CHANGES:
        body["priority"] = 0
    case.body = body


def _keep_the_task_create_rules(case: Case) -> None:
    body = _body(case)
    if body.get("status") == "blocked" and not str(body.get("blocked_reason", "")).strip():
        body["blocked_reason"] = "Waits for the fuzzer."
    if body.get("blocked_by"):
        body["blocked_by"] = [SEEDED_TASK]
    case.body = body


def _keep_the_plan_rules(case: Case) -> None:
    """SPEC §17: refs made unique (`r0`, `r1`, …), blockers earlier refs or the seeded task, at most 500."""
    body = {**_body(case), "project": SEEDED_PROJECT}
    tasks = [dict(task) for task in body.get("tasks") or [] if isinstance(task, dict)]
    edges = 0
    for index, task in enumerate(tasks):
        task["ref"] = f"r{index}"
        if task.get("status") == "blocked" and not str(task.get("blocked_reason", "")).strip():
            task["blocked_reason"] = "Waits for the fuzzer."
        wanted = len(task.get("blocked_by") or [])
        allowed = [SEEDED_TASK, *(f"r{earlier}" for earlier in range(index))]
        blockers = allowed[: min(wanted, 500 - edges)]
        edges += len(blockers)
        task["blocked_by"] = blockers
    body["tasks"] = tasks or [{"ref": "r0", "title": "Planned by the fuzzer"}]
    for decision in body.get("decisions") or []:
        if isinstance(decision, dict) and "task" in decision:
            decision["task"] = SEEDED_TASK
    case.body = body


@schemathesis.hook("before_call")
def send_each_request_as_a_client_would(context: HookContext, case: Case, kwargs: dict[str, Any]) -> None:
    # A link puts a response's value into a header as the response held it: schemathesis
    # 4.32.5 hands `$response.body#/epoch` (an integer) to the transport, which refuses it.
    for name, value in list(case.headers.items()):
        if isinstance(value, int) and not isinstance(value, bool):
            case.headers[name] = str(value)
    # A valid `wait` of up to 30 s on /changes/ holds the answer that long when nothing is new;
    # the fuzzer learns as much from 1 s (an invalid value is still sent as generated).
    wait = str((case.query or {}).get("wait", ""))
    if case.operation.definition.raw.get("operationId") == "changes_list" and wait.isdigit() and 1 < int(wait) <= 30:
        case.query["wait"] = 1
    # The same for a claim-next's `wait` (up to 60 s in the body, SPEC §25).
    body = case.body if isinstance(case.body, dict) else {}
    waited = body.get("wait")
    if case.operation.definition.raw.get("operationId") in ("claims_next", "reviews_next", "landings_next") and (
        isinstance(waited, int) and not isinstance(waited, bool) and 1 < waited <= 60
    ):
        body["wait"] = 1
    # Generated keys repeat ("0", "00"); a client sends a fresh one per request.
    key = case.headers.get("Idempotency-Key")
    if isinstance(key, str) and IDEMPOTENCY_KEY.fullmatch(key):
        case.headers["Idempotency-Key"] = f"{case.id}.{key}"[:128]


@schemathesis.hook("after_call")
def give_back_landings_outside_scenarios(context: HookContext, case: Case, response: Response) -> None:
    """A landing claimed by a single generated request holds its project's target until its lease lapses
    (one live landing per target, SPEC §21.2), and the fuzzing phase claims far more often than there are
    seeded landing projects: the stateful phase then found every target taken (`landings/next` answered
    204), so no link reached renew or release with a live landing ("Missing test data", two runs in a row
    now and then). Outside a scenario no later step uses the landing, so give it back as a lander would."""
    if case.operation.definition.raw.get("operationId") != "landings_next" or response.status_code != 201:
        return
    if case.meta is not None and case.meta.phase.name == TestPhase.STATEFUL:
        return
    landing = response.json()["landing"]
    answer = requests.post(
        f"{os.environ['FUZZ_API_URL']}/landings/{landing['id']}/release/",
        json={"reason": "the fuzzer's single request is over"},
        headers={
            "Authorization": f"Bearer {os.environ['FUZZ_TOKEN']}",
            "X-Lease-Token": landing["lease_token"],
            "X-Lease-Epoch": str(landing["epoch"]),
        },
        timeout=30,
    )
    # A lease the case asked to be short may have lapsed already (409): nothing is held then.
    assert answer.status_code < 500, f"releasing landing {landing['id']}: {answer.status_code} {answer.text}"
