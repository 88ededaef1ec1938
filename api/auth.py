"""Who is calling: an agent by its bearer token (`AgentPrincipal`), a command by its attempt token
(`AttemptPrincipal`, SPEC §23.2), a runner by its runner token (`RunnerPrincipal`, SPEC §23.1), or a
staff user by session.

`caller_of(request)` turns either into a `Caller`, which the views pass to
selectors (`agent`, None for staff: staff sees everything) and to services
(`actor`). DRF loads the authentication and permission classes from its
settings while `rest_framework.views` is still loading, before the app
registry is ready: this module must not import that module, and imports
the ledger's models only inside functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import RequestDataTooBig
from django.http.request import RawPostDataException
from rest_framework import exceptions as drf
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from core.errors import PermissionDenied
from ledger.actors import Actor

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from leases.models import Attempt, IdempotencyRecord
    from ledger.models import Agent, Project
    from runners.models import Runner

BEARER_REALM = 'Bearer realm="leasehold"'
MAX_SLUG_LENGTH = 50  # Project.slug's max_length


class AgentPrincipal:
    """`request.user` for an agent token: authenticated, never staff."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.pk = agent.pk
        # Read with the agent, in its statement (`api.principal_row`): the project of the body's slug
        # (claim-next; None: not one of the agent's) and the stored answer of the Idempotency-Key (None: none).
        self.known_projects: dict[str, Project | None] = {}
        self.known_records: dict[str, IdempotencyRecord | None] = {}
        # By slug, whether claim-next's read, in that statement, found anything claimable (`claimable_read`).
        self.claimable_reads: dict[str, bool] = {}

    def __str__(self) -> str:
        return self.agent.handle

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False


class AttemptPrincipal(AgentPrincipal):
    """`request.user` for an attempt token (SPEC §23.2): its attempt's agent, good for that attempt's calls only.

    `IsAgentOrStaff` lets it through to the views whose `attempt_scope` names
    its attempt (`"attempt"`: the URL's attempt id) or its task (`"task"`: the
    URL's task key, reads only); everything else is PERMISSION_DENIED.
    """

    def __init__(self, attempt: Attempt, token: str) -> None:
        super().__init__(attempt.agent)
        self.attempt_id: int = attempt.pk
        self.epoch: int = attempt.epoch
        self.task_key: str = attempt.task.key
        self.token = token

    def __str__(self) -> str:
        return f"{self.agent.handle} (attempt {self.attempt_id})"


class RunnerPrincipal:
    """`request.user` for a runner token (SPEC §23.1): authenticated, never staff, and no agent.

    `IsAgentOrStaff` lets it through only to the views that declare `runner_scope = True` (register
    and heartbeat); everything else is PERMISSION_DENIED. Slot work uses the slot agents' own tokens.
    """

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.pk = runner.pk

    def __str__(self) -> str:
        return f"runner {self.runner.name}"

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False


RUNNER_SCOPE_MESSAGE = "A runner token is good only for the runner endpoints (register, heartbeat)."
NOT_A_RUNNER_MESSAGE = "Only a runner (its runner token) may call this endpoint."

ATTEMPT_SCOPE_MESSAGE = (
    "An attempt token is good only for its own attempt's calls (notes, git facts, context, renew, finish, "
    "release, the task's text and comments)."
)


class AgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <agent token>` (or an attempt token), checked against the stored SHA-256."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise drf.AuthenticationFailed("Use 'Authorization: Bearer <agent token>'.")
        from api.throttles import FailedAuthentications  # not at the top: see the module's docstring
        from leases.tokens import ATTEMPT_TOKEN_PREFIX
        from runners.tokens import RUNNER_TOKEN_PREFIX

        if token.startswith(RUNNER_TOKEN_PREFIX):
            from runners.selectors import runner_for_token

            runner = runner_for_token(token)
            if runner is not None:
                return RunnerPrincipal(runner), runner
            refusal = "The runner token is not valid, or its runner is deactivated."
        elif token.startswith(ATTEMPT_TOKEN_PREFIX):
            from leases.selectors import attempt_for_token
            from ledger import clock

            attempt = attempt_for_token(token, now=clock.now())
            if attempt is not None:
                return AttemptPrincipal(attempt, token), attempt.agent
            refusal = "The attempt token is not valid, or its attempt has ended."
        else:
            principal = _agent_principal(request, token)
            if principal is not None:
                # A valid token is served whatever its neighbours sent: agents on one machine, behind
                # a NAT or a proxy share an address, and one bad token must not lock them all out.
                return principal, principal.agent
            refusal = "The agent token is not valid, or its agent is deactivated."
        failures = FailedAuthentications(request)
        if failures.exhausted():
            raise drf.Throttled(wait=failures.seconds_left, detail="Too many failed authentications from here.")
        failures.record()
        raise drf.AuthenticationFailed(refusal)

    def authenticate_header(self, request: Request) -> str:
        return BEARER_REALM


def _agent_principal(request: Request, token: str) -> AgentPrincipal | None:
    """The token's agent; with the request's project and idempotency record when it names them, in one statement."""
    view = (getattr(request, "parser_context", None) or {}).get("view")
    body = _json_body(request, view)
    slug = _project_slug(body, view)
    key = _idempotency_key(request)
    if slug is None and key is None:
        from ledger.selectors import agent_for_token

        agent = agent_for_token(token)
        return None if agent is None else AgentPrincipal(agent)
    from api.principal_row import agent_with
    from ledger import clock

    claimable = slug is not None and key is None and _plain_claim(body, view)
    found = agent_with(token, project_slug=slug, idempotency_key=key, claimable_now=clock.now() if claimable else None)
    if found is None:
        return None
    principal = AgentPrincipal(found.agent)
    if slug is not None:
        principal.known_projects[slug] = found.project
        if found.claimable is not None:
            principal.claimable_reads[slug] = found.claimable
    if key is not None:
        principal.known_records[key] = found.record
    return principal


def _json_body(request: Request, view: Any) -> Any:
    """The JSON body of a POST to a view that looks its project up by it (`auth_project_field`), else None.

    Read from the raw body without DRF's parsing, so a body DRF refuses is refused by the view as before.
    """
    if getattr(view, "auth_project_field", None) is None:
        return None
    if request.method != "POST" or not request.content_type.startswith("application/json"):
        return None
    try:
        return json.loads(request._request.body)
    except (ValueError, RawPostDataException, RequestDataTooBig):
        return None


def _project_slug(body: Any, view: Any) -> str | None:
    """The project slug of the body (`_json_body`), in the view's `auth_project_field`."""
    if not isinstance(body, dict):
        return None
    slug = body.get(view.auth_project_field)
    return slug if isinstance(slug, str) and 0 < len(slug) <= MAX_SLUG_LENGTH else None


def _plain_claim(body: dict[str, Any], view: Any) -> bool:
    """A claim-next that neither waits nor names a task class (`auth_claimable_read` views): its first
    statement can be authentication's, which then also reads whether anything is claimable. Not a waiting
    one: its tries read after its waiter is registered, so a commit in between is not missed."""
    return bool(getattr(view, "auth_claimable_read", False)) and not body.get("wait") and "task_class" not in body


def _idempotency_key(request: Request) -> str | None:
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None or request.method in SAFE_METHODS:
        return None
    from api.mutations import IDEMPOTENCY_KEY

    return key if IDEMPOTENCY_KEY.match(key) else None


def claimable_read(request: Request, slug: str) -> bool | None:
    """Whether authentication's statement read anything of the project claimable for the agent
    (`_plain_claim`), None when it did not read it; answered once: a later try of the request reads afresh."""
    found = getattr(request.user, "claimable_reads", None)
    return found.pop(slug, None) if found else None


def known_project(request: Request, slug: str, agent: Agent) -> Project:
    """The project of `slug` among the agent's, as read at authentication when it was; else read now."""
    from ledger.selectors import no_such_project, project_by_slug

    known = getattr(request.user, "known_projects", None) or {}
    if slug not in known:
        return project_by_slug(slug, agent=agent)
    project = known[slug]
    if project is None:
        raise no_such_project(slug)
    return project


class IsAgentOrStaff(BasePermission):
    """Agents (scoped by their projects in every view), or staff users.

    A user's write also needs the Django permission the view names in
    `user_permission`: the read-only Managers group cannot write through the API.
    """

    message = "Only agents and staff users may use the API."

    def has_permission(self, request: Request, view: Any) -> bool:
        user: Any = request.user
        runner_view = bool(getattr(view, "runner_scope", False))
        if isinstance(user, RunnerPrincipal) or runner_view:
            # A runner endpoint takes a runner token only; a runner token opens nothing else.
            self.message = NOT_A_RUNNER_MESSAGE if runner_view else RUNNER_SCOPE_MESSAGE
            return isinstance(user, RunnerPrincipal) and runner_view
        if isinstance(user, AttemptPrincipal):
            if not _within_attempt(user, request, view):
                self.message = ATTEMPT_SCOPE_MESSAGE
                return False
            return True
        if isinstance(user, AgentPrincipal):
            return True
        if user is None or not user.is_authenticated or not user.is_staff:
            return False
        needed = getattr(view, "user_permission", None)
        if request.method not in SAFE_METHODS and needed and not user.has_perm(needed):
            self.message = f"Your account lacks the permission {needed}."
            return False
        return True


def _within_attempt(principal: AttemptPrincipal, request: Request, view: Any) -> bool:
    """Whether this view, for this URL, is one of the attempt's own calls (the view's `attempt_scope`)."""
    scope = getattr(view, "attempt_scope", None)
    arguments = getattr(view, "kwargs", None) or {}
    if scope == "attempt":
        return arguments.get("attempt_id") == principal.attempt_id
    if scope == "task":
        return request.method in SAFE_METHODS and arguments.get("key") == principal.task_key
    return False


@dataclass(frozen=True)
class Caller:
    agent: Agent | None
    user: AbstractBaseUser | None

    @property
    def actor(self) -> Actor:
        return Actor(agent=self.agent) if self.agent is not None else Actor(user=self.user)

    def require_agent(self) -> Agent:
        if self.agent is None:
            raise PermissionDenied("Only an agent (bearer token) can hold leases; staff users cannot.")
        return self.agent


def caller_of(request: Request) -> Caller:
    user: Any = request.user
    if isinstance(user, RunnerPrincipal):
        # Never a staff-like caller with no agent (which selectors read as "sees everything").
        raise PermissionDenied(RUNNER_SCOPE_MESSAGE)
    if isinstance(user, AgentPrincipal):
        return Caller(agent=user.agent, user=None)
    return Caller(agent=None, user=user)
