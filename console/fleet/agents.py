"""Agents: create (token shown once), change projects, rotate token (shown once), deactivate, reactivate.

The agent health page and its levers (force-release all, deactivate with a
reason, reactivate) are `console.fleet.agent_health`, routed here. A deactivated
agent's token is not rotated: the new token would only ever get 401 (bug 10);
reactivate it first.

A token exists in exactly one HTTP response: the page rendered by the POST
that created or rotated it. It is never stored, never put in a message, a
session, a log entry or an event, and that response is marked `no-store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.validators import RegexValidator
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from console.base import ConfirmationForm, LeaseholdModelAdmin, actor_of, badge, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from console.fleet.agent_health import health_page, release_all_view, set_active_view, set_paused_view
from console.reports.budgets import set_budget_action
from core.errors import LedgerError, ValidationFailed
from leases.models import Attempt, AttemptStatus
from leases.services import agent_set_projects
from ledger import clock
from ledger.label_sets import parse_label_list, validate_label_set
from ledger.models import HANDLE_PATTERN, Agent, AgentKind, Project
from ledger.services import agent_create, agent_deactivate, agent_rotate_token, agent_set_labels

HASH_ONLY_NOTE = "Not stored: only its SHA-256 is kept. Rotate it to issue a new one."
LABELS_HELP = (
    "Comma-separated labels of what it can do, e.g. gpu, postgres (SPEC §23.1): it claims only tasks whose "
    "requires are all among them. A runner's slots carry their runner's labels."
)


def clean_label_field(text: str) -> list[str]:
    """A comma-separated labels field, by the one rule of `ledger.label_sets`."""
    try:
        return validate_label_set(parse_label_list(text), field="labels")
    except ValidationFailed as refused:
        raise forms.ValidationError(refused.message) from None


class AgentCreateForm(forms.Form):
    handle = forms.CharField(
        max_length=64,
        validators=[RegexValidator(HANDLE_PATTERN, "Lowercase letters, digits, '.', '_' and '-'.")],
        help_text="Unique and lowercase, e.g. agent-07. It names the agent in labels and events.",
    )
    kind = forms.ChoiceField(choices=AgentKind.choices, initial=AgentKind.CLAUDE)
    projects = forms.ModelMultipleChoiceField(
        queryset=Project.objects.filter(archived_at__isnull=True).order_by("slug"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The projects it may see and work on. None means none.",
    )
    labels = forms.CharField(
        required=False,
        max_length=2000,
        help_text=LABELS_HELP,
    )

    def clean_labels(self) -> list[str]:
        return clean_label_field(self.cleaned_data.get("labels", ""))


class AgentProjectsForm(forms.Form):
    projects = forms.ModelMultipleChoiceField(
        queryset=Project.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The projects it may see and claim in. Leases it holds in a project it loses are not ended: "
        "it may still renew and finish them. Force-release them to end them sooner.",
    )
    labels = forms.CharField(required=False, max_length=2000, help_text=LABELS_HELP)

    def clean_labels(self) -> list[str]:
        return clean_label_field(self.cleaned_data.get("labels", ""))

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Open projects, and any archived one the agent still has (so that saving keeps or drops it knowingly).
        field = self.fields["projects"]
        assert isinstance(field, forms.ModelMultipleChoiceField)
        open_or_held = Q(archived_at__isnull=True) | Q(agents=agent)
        field.queryset = Project.objects.filter(open_or_held).distinct().order_by("slug")


def token_page(
    request: HttpRequest, model_admin: admin.ModelAdmin, *, title: str, issued: Sequence[tuple[Agent, str]]
) -> TemplateResponse:
    """The one response that ever carries these tokens."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.opts,
        "issued": issued,
    }
    response = TemplateResponse(request, "admin/ledger/agent/token_once.html", context)
    response["Cache-Control"] = "no-store, max-age=0"
    response["Pragma"] = "no-cache"
    return response


class AgentAdmin(LeaseholdModelAdmin):
    list_display = ["handle", "kind", "active_badge", "project_list", "live_leases", "last_seen_at", "created_at"]
    list_filter = ["is_active", "kind", "projects"]
    search_fields = ["handle"]
    ordering = ["handle"]
    actions = ["rotate_token", "deactivate", "set_budget"]
    readonly_fields = (
        "handle",
        "kind",
        "active_badge",
        "project_list",
        "label_list",
        "token",
        "last_seen_at",
        "created_at",
        "deactivated_at",
        "daily_budget_tokens",
        "daily_budget_cost_usd",
    )
    fields = readonly_fields

    @admin.action(description="Set daily budget…", permissions=["operate"])
    def set_budget(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        return set_budget_action(self, request, queryset, action_name="set_budget")

    change_form_template = "admin/ledger/agent/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        """Live leases per agent as a subquery over its active attempts (the agent/status index), not a
        join over every attempt the agent ever had: the list's cost does not grow with history."""
        now = clock.now()
        live = (
            Attempt.objects.filter(agent=OuterRef("pk"), status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
            .order_by()
            .values("agent")
            .annotate(n=Count("id"))
            .values("n")
        )
        return (
            super().get_queryset(request).prefetch_related("projects").annotate(live_count=Coalesce(Subquery(live), 0))
        )

    @admin.display(description="active", ordering="is_active")
    def active_badge(self, agent: Agent) -> Any:
        return badge("yes" if agent.is_active else "no", "active" if agent.is_active else "deactivated")

    @admin.display(description="projects")
    def project_list(self, agent: Agent) -> str:
        return ", ".join(project.slug for project in agent.projects.all()) or "— (none)"

    @admin.display(description="labels")
    def label_list(self, agent: Agent) -> str:
        return ", ".join(agent.labels or []) or "— (none: it claims only tasks that require nothing)"

    @admin.display(description="live leases", ordering="live_count")
    def live_leases(self, agent: Agent) -> int:
        return int(getattr(agent, "live_count", 0))

    @admin.display(description="API token")
    def token(self, agent: Agent) -> Any:
        return format_html('<span class="lh-muted">{}</span>', HASH_ONLY_NOTE)

    # --- create, with the token shown once ----------------------------------

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None) -> Any:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = AgentCreateForm(request.POST if request.method == "POST" else None)
        if form.is_bound and form.is_valid():
            data = form.cleaned_data
            try:
                agent, token = agent_create(
                    handle=data["handle"],
                    kind=data["kind"],
                    projects=data["projects"],
                    labels=data["labels"],
                    actor=actor_of(request),
                )
            except LedgerError as exc:
                fields = exc.details.get("fields") or {}
                form.add_error("handle" if "handle" in fields else None, exc.message)
            else:
                self.log_addition(request, agent, "Created the agent; its API token was shown once.")
                return token_page(request, self, title=f"Agent {agent.handle} created", issued=[(agent, token)])
        context = {
            **self.admin_site.each_context(request),
            "title": "Add agent",
            "opts": self.opts,
            "form": form,
            "media": self.media + form.media,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/ledger/agent/add_form.html", context)

    # --- rotate -------------------------------------------------------------

    def _rotate_flow(
        self, request: HttpRequest, agents: list[Agent], *, action_name: str | None
    ) -> HttpResponse | None:
        inactive = [agent.handle for agent in agents if not agent.is_active]
        if inactive:
            # Refused before anything is rotated: a deactivated agent's new token would only get 401.
            self.message_user(
                request,
                f"Not rotated: {', '.join(inactive)} {'is' if len(inactive) == 1 else 'are'} deactivated, and a "
                "deactivated agent's token is refused. Reactivate it first (Agent health → Reactivate…).",
                messages.ERROR,
            )
            return HttpResponseRedirect(reverse("admin:ledger_agent_changelist")) if action_name is None else None
        form = forms.Form(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            actor = actor_of(request)
            issued = []
            for agent in agents:
                try:
                    rotated, token = agent_rotate_token(agent=agent, actor=actor)
                except LedgerError as exc:  # deactivated meanwhile
                    self.message_user(request, exc.message, messages.ERROR)
                    continue
                self.log_change(request, rotated, "Rotated the API token; the new one was shown once.")
                issued.append((rotated, token))
            if not issued:
                return HttpResponseRedirect(reverse("admin:ledger_agent_changelist"))
            return token_page(request, self, title=f"Rotated {plural(len(issued), 'token')}", issued=issued)
        confirmation = Confirmation(
            title=f"Rotate the API token of {plural(len(agents), 'agent')}",
            intro="Each selected agent gets a new API token, shown once on the next page. "
            "The old token stops working at once: running agents must be given the new one.",
            submit_label="Yes, rotate",
            columns=["Agent", "Kind", "Active", "Last seen"],
            rows=[(a, [a.handle, a.get_kind_display(), self.active_badge(a), a.last_seen_at or "—"]) for a in agents],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name=action_name,
            objects=agents,
            cancel_url=reverse("admin:ledger_agent_changelist"),
        )

    @admin.action(description="Rotate API token…", permissions=["operate"])
    def rotate_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        return self._rotate_flow(request, list(queryset), action_name="rotate_token")

    def rotate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        agent = get_object_or_404(self.get_queryset(request), pk=object_id)
        return self._rotate_flow(request, [agent], action_name=None) or HttpResponseRedirect(
            reverse("admin:ledger_agent_changelist")
        )

    # --- projects -----------------------------------------------------------

    def projects_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        agent = get_object_or_404(self.get_queryset(request), pk=object_id)
        form = AgentProjectsForm(
            request.POST if request.method == "POST" else None,
            agent=agent,
            initial={"projects": list(agent.projects.all()), "labels": ", ".join(agent.labels or [])},
        )
        if form.is_bound and form.is_valid():
            changed = agent_set_projects(agent=agent, projects=form.cleaned_data["projects"], actor=actor_of(request))
            parts = [f"added {', '.join(changed.added)}"] if changed.added else []
            parts += [f"removed {', '.join(changed.removed)}"] if changed.removed else []
            said = [f"Projects: {'; '.join(parts)}."] if parts else []
            labels = form.cleaned_data["labels"]
            if agent_set_labels(agent=agent, labels=labels, actor=actor_of(request)):
                said.append(f"Labels: {', '.join(labels) or '(none)'}.")
            if said:
                self.log_change(request, agent, " ".join(said))
                self.message_user(request, f"{agent.handle}: {' '.join(said)}")
            else:
                self.message_user(request, f"{agent.handle}: projects and labels unchanged.")
            return HttpResponseRedirect(reverse("admin:ledger_agent_change", args=[agent.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Projects and labels of {agent.handle}",
            "opts": self.opts,
            "original": agent,
            "form": form,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/ledger/agent/projects_form.html", context)

    def get_urls(self) -> list[URLPattern]:
        rotate = path(
            "<path:object_id>/rotate-token/", self.admin_site.admin_view(self.rotate_view), name="ledger_agent_rotate"
        )
        projects = path(
            "<path:object_id>/projects/", self.admin_site.admin_view(self.projects_view), name="ledger_agent_projects"
        )
        wrap = self.admin_site.admin_view
        health = [
            path("health/", wrap(lambda request: health_page(self, request)), name="ledger_agent_health"),
            path(
                "<path:object_id>/release-all/",
                wrap(lambda request, object_id: release_all_view(self, request, object_id)),
                name="ledger_agent_release_all",
            ),
            path(
                "<path:object_id>/deactivate/",
                wrap(lambda request, object_id: set_active_view(self, request, object_id, active=False)),
                name="ledger_agent_deactivate_one",
            ),
            path(
                "<path:object_id>/reactivate/",
                wrap(lambda request, object_id: set_active_view(self, request, object_id, active=True)),
                name="ledger_agent_reactivate",
            ),
            path(
                "<path:object_id>/pause/",
                wrap(lambda request, object_id: set_paused_view(self, request, object_id, paused=True)),
                name="ledger_agent_pause",
            ),
            path(
                "<path:object_id>/resume/",
                wrap(lambda request, object_id: set_paused_view(self, request, object_id, paused=False)),
                name="ledger_agent_resume",
            ),
        ]
        return [*health, rotate, projects, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {"health_url": reverse("admin:ledger_agent_health"), **(extra_context or {})}
        return super().changelist_view(request, extra)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"can_operate": self.has_operate_permission(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    # --- deactivate ---------------------------------------------------------

    @admin.action(description="Deactivate (refuse its token from now on)…", permissions=["operate"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        agents = list(queryset)
        form = ConfirmationForm(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            actor = actor_of(request)
            reason = form.cleaned_data["reason"]
            deactivated, already = [], []
            for agent in agents:
                if not agent.is_active:
                    already.append(agent.handle)
                    continue
                agent_deactivate(agent=agent, actor=actor, reason=reason)
                self.log_change(request, agent, f"Deactivated: its API token is refused from now on. {reason}")
                deactivated.append(agent.handle)
            self.report(
                request,
                done=f"Deactivated {plural(len(deactivated), 'agent')}." if deactivated else None,
                skipped=[f"Already inactive: {', '.join(already)}."] if already else [],
            )
            return None
        confirmation = Confirmation(
            title=f"Deactivate {plural(len(agents), 'agent')}",
            intro="A deactivated agent's API token is refused from now on. Its live leases are not revoked: "
            "they run out on their own (force-release the tasks to free them sooner). Reactivate it on Agent health.",
            submit_label="Yes, deactivate",
            columns=["Agent", "Kind", "Active", "Live leases"],
            rows=[(a, [a.handle, a.get_kind_display(), self.active_badge(a), self.live_leases(a)]) for a in agents],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name="deactivate",
            objects=agents,
            cancel_url=reverse("admin:ledger_agent_changelist"),
        )
