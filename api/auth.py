"""Who is calling: an agent by its bearer token (`AgentPrincipal`), or a staff user by session.

`caller_of(request)` turns either into a `Caller`, which the views pass to
selectors (`agent`, None for staff: staff sees everything) and to services
(`actor`). DRF loads the authentication and permission classes from its
settings while `rest_framework.views` is still loading, before the app
registry is ready: this module must not import that module, and imports
the ledger's models only inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rest_framework import exceptions as drf
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from core.errors import PermissionDenied
from ledger.actors import Actor

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from ledger.models import Agent

BEARER_REALM = 'Bearer realm="leasehold"'


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

    def __str__(self) -> str:
        return self.agent.handle

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False


class AgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <agent token>`, checked against the stored SHA-256."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise drf.AuthenticationFailed("Use 'Authorization: Bearer <agent token>'.")
        from api.throttles import FailedAuthentications  # not at the top: see the module's docstring
        from ledger.selectors import agent_for_token

        agent = agent_for_token(token)
        if agent is not None:
            # A valid token is served whatever its neighbours sent: agents on one machine, behind
            # a NAT or a proxy share an address, and one bad token must not lock them all out.
            return AgentPrincipal(agent), agent
        failures = FailedAuthentications(request)
        if failures.exhausted():
            raise drf.Throttled(wait=failures.seconds_left, detail="Too many failed authentications from here.")
        failures.record()
        raise drf.AuthenticationFailed("The agent token is not valid, or its agent is deactivated.")

    def authenticate_header(self, request: Request) -> str:
        return BEARER_REALM


class IsAgentOrStaff(BasePermission):
    """Agents (scoped by their projects in every view), or staff users.

    A user's write also needs the Django permission the view names in
    `user_permission`: the read-only Managers group cannot write through the API.
    """

    message = "Only agents and staff users may use the API."

    def has_permission(self, request: Request, view: Any) -> bool:
        user: Any = request.user
        if isinstance(user, AgentPrincipal):
            return True
        if user is None or not user.is_authenticated or not user.is_staff:
            return False
        needed = getattr(view, "user_permission", None)
        if request.method not in SAFE_METHODS and needed and not user.has_perm(needed):
            self.message = f"Your account lacks the permission {needed}."
            return False
        return True


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
    if isinstance(user, AgentPrincipal):
        return Caller(agent=user.agent, user=None)
    return Caller(agent=None, user=user)
